package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// Helpers of the hostile-input audit (audit_test.go). It shares the
// suites' helpers (userGuard, switched, request); these are its own.

// withAuditUsers installs userGuard and lets the broker create topics on
// metadata requests, as a careless production cluster does: a request that
// asked for one would get it, so its absence proves nothing asked.
func withAuditUsers(o *stack.DevOptions) {
	o.Guards = userGuard{}
	o.BrokerOptions.Extra = append(o.BrokerOptions.Extra, kfake.AllowAutoTopicCreation())
}

// auditProblem checks an HTTP answer: the status, an
// application/problem+json body whose status matches, and a detail that
// contains every one of says (case-sensitive). It returns the detail.
func auditProblem(t *testing.T, what string, resp *http.Response, body string, status int, says ...string) string {
	t.Helper()
	var p handler.Problem
	err := json.Unmarshal([]byte(body), &p)
	switch {
	case resp.StatusCode != status:
		t.Errorf("%s: %d %q, want %d", what, resp.StatusCode, body, status)
		return p.Detail
	case resp.Header.Get("content-type") != "application/problem+json" || err != nil:
		t.Errorf("%s: %d with content-type %q and body %q (%v), want problem+json", what, resp.StatusCode, resp.Header.Get("content-type"), body, err)
		return ""
	case p.Status != status || strings.TrimSpace(p.Detail) == "" || strings.ContainsAny(p.Detail, "\r\n"):
		t.Errorf("%s: problem %+v, want status %d and a one-line detail", what, p, status)
	}
	for _, s := range says {
		if !strings.Contains(p.Detail, s) {
			t.Errorf("%s: detail %q does not say %q", what, p.Detail, s)
		}
	}
	return p.Detail
}

// auditStatus checks a gRPC error: the code and a grpc-message that
// contains every one of says.
func auditStatus(t *testing.T, what string, err error, code interface{ String() string }, says ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code().String() != code.String() {
		t.Errorf("%s: %v, want %s", what, err, code)
		return
	}
	if strings.TrimSpace(st.Message()) == "" {
		t.Errorf("%s: %s without a grpc-message", what, st.Code())
	}
	for _, s := range says {
		if !strings.Contains(st.Message(), s) {
			t.Errorf("%s: grpc-message %q does not say %q", what, st.Message(), s)
		}
	}
}

// auditUnary makes a unary call with raw message bytes and metadata pairs.
func auditUnary(e *env, method string, msg []byte, md ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var out rawMessage
	err := e.grpcConn().Invoke(ctx, method, &rawMessage{b: msg}, &out, grpc.ForceCodecV2(rawCodec{}))
	return out.b, err
}

// auditFetch opens a server stream with an empty request and returns the
// error that ends it before any message (nil if a message came first).
func auditFetch(e *env, method string, md ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	desc := &grpc.StreamDesc{ServerStreams: true}
	s, err := e.grpcConn().NewStream(ctx, desc, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	if err := s.SendMsg(&rawMessage{}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	var m rawMessage
	return s.RecvMsg(&m)
}

// auditNoTopics fails for every name that exists on the broker.
func auditNoTopics(t *testing.T, e *env, names ...string) {
	t.Helper()
	for _, n := range names {
		if e.dev.Broker.Cluster().TopicInfo(n) != nil {
			t.Errorf("topic %q exists: a request created it", n)
		}
	}
}

// auditRecords reads a topic from the beginning to its end offsets now with
// a librdkafka consumer of its own (extra: client properties such as SASL).
func auditRecords(t *testing.T, addr, topic string, extra kafka.ConfigMap) []*kafka.Message {
	t.Helper()
	cm := kafka.ConfigMap{"bootstrap.servers": addr, "group.id": "audit-" + uuid.NewString(),
		"enable.auto.commit": false, "log_level": 3}
	for k, v := range extra {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		t.Fatal(err)
	}
	tm := md.Topics[topic]
	if tm.Error.Code() != kafka.ErrNoError {
		t.Fatalf("topic %s: %v", topic, tm.Error)
	}
	var out []*kafka.Message
	for _, p := range tm.Partitions {
		lo, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if hi <= lo {
			continue
		}
		if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: p.ID, Offset: kafka.Offset(lo)}}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for next := lo; next < hi; {
			if time.Now().After(deadline) {
				t.Fatalf("reading %s[%d]: at %d of %d", topic, p.ID, next, hi)
			}
			if m, ok := c.Poll(100).(*kafka.Message); ok && m.TopicPartition.Error == nil {
				out = append(out, m)
				next = int64(m.TopicPartition.Offset) + 1
			}
		}
	}
	return out
}

// auditRecordWith is the one record of ms whose header name has value.
func auditRecordWith(t *testing.T, ms []*kafka.Message, name, value string) *kafka.Message {
	t.Helper()
	var found []*kafka.Message
	for _, m := range ms {
		for _, h := range m.Headers {
			if h.Key == name && string(h.Value) == value {
				found = append(found, m)
				break
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d records with %s=%s, want 1", len(found), name, value)
	}
	return found[0]
}

// auditRaw sends bytes on a new connection to addr and reads one HTTP/1.1
// response (nil, with the error, if the server closed without one).
func auditRaw(t *testing.T, addr string, request []byte) (*http.Response, string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(request); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// auditLog is an io.Writer for a slog.TextHandler at debug level: it keeps
// every line, so a test can search everything that was logged, and
// signals chosen lines, so a test can wait on what a component saw.
type auditLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	waits []auditWait
}

type auditWait struct {
	has []string
	ch  chan struct{}
}

// logger is a debug-level logger writing to l.
func (l *auditLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *auditLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	line := string(p)
	kept := l.waits[:0]
	for _, w := range l.waits {
		all := true
		for _, s := range w.has {
			all = all && strings.Contains(line, s)
		}
		if all {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	l.waits = kept
	return len(p), nil
}

// on returns a channel closed at the next line containing every one of has.
func (l *auditLog) on(has ...string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	l.waits = append(l.waits, auditWait{has: has, ch: ch})
	return ch
}

// text is everything logged so far.
func (l *auditLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// auditWaitFor waits (bounded) for a channel of auditLog.on.
func auditWaitFor(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// auditGRPCRaw sends a gRPC request of raw body bytes (frames as the test
// writes them) over h2c with extra headers, and returns the grpc-status
// and the decoded grpc-message of the answer (trailers, or trailers-only
// headers).
func auditGRPCRaw(t *testing.T, e *env, path string, body []byte, hdr ...string) (codes.Code, string) {
	t.Helper()
	req, err := http.NewRequest("POST", e.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := e.h2c.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("%s: reading the body: %v", path, err)
	}
	st, msg := resp.Trailer.Get("grpc-status"), resp.Trailer.Get("grpc-message")
	if st == "" {
		st, msg = resp.Header.Get("grpc-status"), resp.Header.Get("grpc-message")
	}
	n, err := strconv.Atoi(st)
	if err != nil {
		t.Fatalf("%s: HTTP %d without a grpc-status (%v)", path, resp.StatusCode, resp.Header)
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return codes.Code(n), msg
}

// auditPeer is an ext_proc peer that forwards every header as given (an
// Envoy that strips nothing): it sends request_headers and one body chunk
// straight to the processor and returns the status of its immediate
// response.
func auditPeer(t *testing.T, e *env, headers [][2]string, body string) int {
	t.Helper()
	st, err := auditPeerErr(t, e, headers, body)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// auditPeerErr is auditPeer returning the error that ended the stream.
func auditPeerErr(t *testing.T, e *env, headers [][2]string, body string) (int, error) {
	t.Helper()
	st, _, err := auditPeerReply(t, e, headers, body)
	return st, err
}

// auditPeerReply is auditPeerErr with the answer's body.
func auditPeerReply(t *testing.T, e *env, headers [][2]string, body string) (int, string, error) {
	t.Helper()
	conn, err := grpc.NewClient(e.dev.Processor.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var kv []string
	for _, h := range headers {
		kv = append(kv, h[0], h[1])
	}
	for _, m := range []*extprocv3.ProcessingRequest{
		extproctest.RequestHeaders(false, kv...),
		extproctest.RequestBody([]byte(body), true),
	} {
		if err := stream.Send(m); err != nil {
			break // the processor ended the stream: Recv says why
		}
	}
	resp, err := stream.Recv()
	if err != nil {
		return 0, "", err
	}
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("the processor answered %T, want an immediate response", resp.GetResponse())
	}
	return int(ir.GetStatus().GetCode()), string(ir.GetBody()), nil
}

// auditDenied reports request header names that must never reach a
// record. Names of gRPC metadata arrive as meta:<name>; there `prefer` is
// call data like any other (it means nothing to grpc-kafka).
func auditDenied(name string) bool {
	meta, isMeta := strings.CutPrefix(name, "meta:")
	switch meta {
	case "authorization", "cookie", "proxy-authorization", "content-length",
		"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer":
		return true
	case "prefer":
		return !isMeta
	}
	return strings.HasPrefix(meta, "x-envoy-")
}

// auditCheckHeaders fails for every denied header of m, and for every one
// of kept that m lacks (so a record that dropped everything does not pass).
func auditCheckHeaders(t *testing.T, what string, m *kafka.Message, kept ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, h := range m.Headers {
		have[h.Key] = true
		if auditDenied(h.Key) {
			t.Errorf("%s: the record carries %s=%q", what, h.Key, h.Value)
		}
	}
	for _, k := range kept {
		if !have[k] {
			t.Errorf("%s: the record lacks %s (headers %v)", what, k, m.Headers)
		}
	}
}
