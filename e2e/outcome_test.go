package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const cutConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: "/cut/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: cut-requests, key: "${params.id}", reply-to: cut-responses }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: cut-requests, reply-to: cut-responses }
limits: { reply-timeout: 30s }
`

// cutProxy forwards TCP connections to a processor until cut, when it
// closes every connection at once, as a processor killed with SIGKILL
// does: Envoy's ext_proc streams on them fail with UNAVAILABLE.
type cutProxy struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to}
	t.Cleanup(p.cutAll)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = c.Close()
				_ = up.Close()
				return
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// A processor that is cut off after the records of its exchanges are in
// the log: Envoy answers status_on_error, which envoy.yaml sets to 504
// (outcome unknown, retry with the same key) with no body, and gRPC
// clients get UNAVAILABLE with no message. 503 would tell them the
// records were not written, which is false here.
func TestProcessorCutMidExchangeIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	tr := newTestResponder()
	e := startEnv(t, cutConfig, withResponder(tr, "cut-requests"))
	release := tr.hold()
	defer release()
	proxy := startCutProxy(t, e.dev.Processor.Addr())
	front, err := stack.StartFront(envoy.DefaultYAML(), "127.0.0.1:0", proxy.ln.Addr().String(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	cc, err := grpc.NewClient(front.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })

	const n = 10
	type answer struct {
		what   string
		status int
		body   string
		err    error
	}
	answers := make(chan answer, n+1)
	for i := range n {
		go func() {
			req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s/cut/%d", front.Addr(), i), nil)
			req.Header.Set("idempotency-key", fmt.Sprintf("cut-%d", i))
			resp, err := e.h1.Do(req)
			if err != nil {
				answers <- answer{what: "http", err: err}
				return
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			answers <- answer{what: "http", status: resp.StatusCode, body: string(b), err: err}
		}()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := cc.Invoke(ctx, "/example.Echo/Say", &rawMessage{b: []byte("cut")}, &rawMessage{}, grpc.ForceCodecV2(rawCodec{}))
		answers <- answer{what: "grpc", err: err}
	}()
	// Every record is in the log (the responder holds the replies): one
	// per HTTP request, and the gRPC call's message record and end record.
	pollUntil(t, "every record in the log", func() bool { return e.endOffsets("cut-requests") == n+2 })
	recs := e.readTopic("cut-requests")
	for i := range n {
		if got := len(recordsWith(recs, "idempotency-key", fmt.Sprintf("cut-%d", i))); got != 1 {
			t.Fatalf("request cut-%d: %d records in the log, want 1", i, got)
		}
	}
	select {
	case a := <-answers:
		t.Fatalf("an answer before the cut: %+v", a)
	default:
	}
	proxy.cutAll()
	for range n + 1 {
		var a answer
		select {
		case a = <-answers:
		case <-time.After(30 * time.Second):
			t.Fatal("no answer after the processor was cut")
		}
		switch a.what {
		case "http":
			if a.err != nil || a.status != http.StatusGatewayTimeout || a.body != "" {
				t.Errorf("HTTP after the cut: %d %q %v, want 504 (outcome unknown) with no body", a.status, a.body, a.err)
			}
		case "grpc":
			st, _ := status.FromError(a.err)
			if a.err == nil || errors.Is(a.err, context.DeadlineExceeded) || st.Code() != codes.Unavailable || st.Message() != "" {
				t.Errorf("gRPC after the cut: %v, want UNAVAILABLE with no message", a.err)
			}
		}
	}
}
