package e2e_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// readTopic reads a topic from the beginning up to its end offsets now, with
// a consumer of its own, in (partition, offset) order.
func (e *env) readTopic(topic string) []*kafka.Message {
	e.t.Helper()
	return auditRecords(e.t, e.dev.Broker.Addr(), topic, nil)
}

// recHeader is the first value of a record header.
func recHeader(m *kafka.Message, name string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

// recordsWith keeps the records whose header name has value.
func recordsWith(ms []*kafka.Message, name, value string) []*kafka.Message {
	var out []*kafka.Message
	for _, m := range ms {
		if v, ok := recHeader(m, name); ok && v == value {
			out = append(out, m)
		}
	}
	return out
}

// userGuard is a test GuardChecker: the identity is the x-user header (or
// gRPC metadata), as a verified token's subject would be (a real deployment
// verifies a token; the processor only sees the identity). x-user-bin, in
// base64, gives an identity of any bytes, as a token's sub claim may hold
// ("\u0000" is valid JSON).
type userGuard struct{}

func (userGuard) Check(_ context.Context, _ string, h route.Headers, _ map[string]*structpb.Struct) (route.Identity, error) {
	if u, ok := h.Lookup("x-user"); ok && u != "" {
		return route.Identity{Subject: u}, nil
	}
	if u, ok := h.Lookup("x-user-bin"); ok {
		if b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(u, "=")); err == nil && len(b) > 0 {
			return route.Identity{Subject: string(b)}, nil
		}
	}
	return route.Identity{}, errors.New("no x-user header")
}

// handlerOf captures the http-kafka handler the processor runs, to read its
// waiter and flight counts.
func handlerOf(dst **httpkafka.Handler) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		o.WrapHTTP = func(h handler.HTTPHandler) handler.HTTPHandler {
			if hk, ok := h.(*httpkafka.Handler); ok {
				*dst = hk
			}
			return h
		}
	}
}

// pollUntil polls cond until it holds, for states that have no event to
// wait on (counters, readiness, metrics): the one bounded poll of these
// tests. The bound is generous, for a loaded machine; a state that never
// comes fails the test, naming what.
func pollUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testResponder answers requests through a gate the test can close, and
// reports each request it sees.
type testResponder struct {
	seen chan *responder.Request
	mu   sync.Mutex
	gate chan struct{} // nil: answer at once
}

func newTestResponder() *testResponder {
	return &testResponder{seen: make(chan *responder.Request, 1000)}
}

// hold makes the responder wait before answering; the returned func lets
// it answer.
func (tr *testResponder) hold() (release func()) {
	g := make(chan struct{})
	tr.mu.Lock()
	tr.gate = g
	tr.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			tr.mu.Lock()
			tr.gate = nil
			tr.mu.Unlock()
			close(g)
		})
	}
}

// forget drops the requests seen so far.
func (tr *testResponder) forget() {
	for {
		select {
		case <-tr.seen:
		default:
			return
		}
	}
}

// next is the next request the responder saw.
func (tr *testResponder) next(t *testing.T) *responder.Request {
	t.Helper()
	select {
	case r := <-tr.seen:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the responder saw no request")
		return nil
	}
}

// handle replies :status 200 (201 for POST), content-type text/plain,
// x-user echoed, and a body naming the request; /hostile paths get hostile
// replies.
func (tr *testResponder) handle(ctx context.Context, req *responder.Request) ([]responder.Reply, error) {
	select {
	case tr.seen <- req:
	default: // nobody is looking
	}
	tr.mu.Lock()
	g := tr.gate
	tr.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	method, _ := req.Header(":method")
	path, _ := req.Header(":path")
	user, _ := req.Header("x-user")
	switch {
	case strings.HasPrefix(path, "/hostile/ok"):
		return []responder.Reply{{Value: []byte("hostile"), Headers: []responder.Header{
			{Key: ":status", Value: []byte("201")},
			{Key: ":path", Value: []byte("/evil")},
			{Key: "transfer-encoding", Value: []byte("chunked")},
			{Key: "x-split", Value: []byte("a\nset-cookie: evil=1")},
			{Key: "content-length", Value: []byte("999")},
			{Key: "x-kept", Value: []byte("kept")},
		}}}, nil
	case strings.HasPrefix(path, "/hostile/bad"):
		return []responder.Reply{{Value: []byte("bad"), Headers: []responder.Header{{Key: ":status", Value: []byte("99")}}}}, nil
	}
	status := 200
	if method == http.MethodPost {
		status = 201
	}
	body := fmt.Sprintf("%s %s key=%s body=%s", method, path, req.Key, req.Value)
	return []responder.Reply{responder.HTTPReply(status, []byte(body),
		responder.Header{Key: "content-type", Value: []byte("text/plain")},
		responder.Header{Key: "x-user", Value: []byte(user)},
		responder.Header{Key: "x-correlation", Value: []byte(req.CorrelationID)},
	)}, nil
}

// withResponder adds a responder for topic to the dev stack.
func withResponder(tr *testResponder, topic string, headers ...string) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		ro := responder.Options{Topic: topic, Handler: tr.handle, Logger: slog.New(slog.DiscardHandler)}
		if len(headers) == 2 {
			ro.CorrelationHeader, ro.ReplyToHeader = headers[0], headers[1]
		}
		o.Responders = append(o.Responders, ro)
	}
}

// acksSeen records the acks of every ProduceRequest per topic; it only
// observes (the broker answers as usual).
type acksSeen struct {
	mu   sync.Mutex
	acks map[string][]int16
}

func observeAcks(c *kfake.Cluster) *acksSeen {
	a := &acksSeen{acks: map[string][]int16{}}
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, t := range pr.Topics {
			a.acks[t.Topic] = append(a.acks[t.Topic], pr.Acks)
		}
		return nil, nil, false
	})
	return a
}

func (a *acksSeen) of(topic string) []int16 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int16(nil), a.acks[topic]...)
}

// switchedListener is the embedded broker's listener with a switch: off,
// it closes the listening socket (connections are refused) and every open
// connection, as a broker that went away; on, it listens on the same
// address again and clients reconnect. The broker's accept loop never sees
// the gap.
type switchedListener struct {
	mu     sync.Mutex
	ln     net.Listener
	addr   string
	off    bool
	on     chan struct{} // closed when switched on again
	conns  map[net.Conn]struct{}
	closed bool // the broker stopped: Accept ends, even while off
}

func (l *switchedListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		ln, on, closed := l.ln, l.on, l.closed
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		if ln == nil {
			<-on
			continue
		}
		c, err := ln.Accept()
		l.mu.Lock()
		if err != nil {
			if l.ln == ln && !l.off {
				l.mu.Unlock()
				return nil, err // closed for good (the broker stops)
			}
			l.mu.Unlock()
			continue
		}
		if l.off {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		return &switchedConn{Conn: c, l: l}, nil
	}
}

func (l *switchedListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil // the broker closes its listener again once Accept failed
	}
	l.off = false
	l.closed = true
	if l.ln == nil {
		close(l.on)
		return nil
	}
	return l.ln.Close()
}

func (l *switchedListener) Addr() net.Addr { return addrString(l.addr) }

type addrString string

func (a addrString) Network() string { return "tcp" }
func (a addrString) String() string  { return string(a) }

// set switches the broker's reachability.
func (l *switchedListener) set(t *testing.T, on bool) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if on == !l.off {
		return
	}
	l.off = !on
	if !on {
		_ = l.ln.Close()
		l.ln = nil
		l.on = make(chan struct{})
		for c := range l.conns {
			_ = c.Close()
		}
		clear(l.conns)
		return
	}
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", l.addr, err)
	}
	l.ln = ln
	close(l.on)
}

type switchedConn struct {
	net.Conn
	l *switchedListener
}

func (c *switchedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c.Conn)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// switched gives the embedded broker a switchedListener.
func switched(dst **switchedListener) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		o.BrokerOptions.Extra = append(o.BrokerOptions.Extra, kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			l := &switchedListener{ln: ln, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}, on: make(chan struct{})}
			*dst = l
			return l, nil
		}))
	}
}

// logEvents is a slog handler that passes warnings to the test log and
// signals chosen messages, for tests that wait on what a component saw.
type logEvents struct {
	t     *testing.T
	mu    *sync.Mutex
	waits *[]logWait
	attrs []slog.Attr
}

type logWait struct {
	msg   string
	attr  string // "key=value" the record must carry, or ""
	ch    chan struct{}
	fired bool
}

func newLogEvents(t *testing.T) *logEvents {
	return &logEvents{t: t, mu: &sync.Mutex{}, waits: &[]logWait{}}
}

// on returns a channel closed at the next record with msg (and attr).
func (l *logEvents) on(msg, attr string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	*l.waits = append(*l.waits, logWait{msg: msg, attr: attr, ch: ch})
	return ch
}

func (l *logEvents) Enabled(context.Context, slog.Level) bool { return true }

func (l *logEvents) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{}
	for _, a := range l.attrs {
		attrs[a.Key+"="+a.Value.String()] = ""
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key+"="+a.Value.String()] = ""
		return true
	})
	l.mu.Lock()
	for i := range *l.waits {
		w := &(*l.waits)[i]
		if w.fired || w.msg != r.Message {
			continue
		}
		if _, ok := attrs[w.attr]; w.attr != "" && !ok {
			continue
		}
		w.fired = true
		close(w.ch)
	}
	l.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		l.t.Log(r.Level.String() + " " + r.Message)
	}
	return nil
}

func (l *logEvents) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	c.attrs = append(append([]slog.Attr(nil), l.attrs...), as...)
	return &c
}

func (l *logEvents) WithGroup(string) slog.Handler { return l }
