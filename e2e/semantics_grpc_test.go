package e2e_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// gRPC semantics for services written for Zilla: correlation headers named
// zilla:*, so the status and message headers follow (zilla:status,
// zilla:message), and metadata conditions written Zilla's way.
const zillaGRPCConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  grpc0:
    type: grpc-kafka
    kind: proxy
    options:
      correlation:
        headers: { correlation-id: "zilla:correlation-id", reply-to: "zilla:reply-to", service: "zilla:service", method: "zilla:method" }
    routes:
      - when: [{ service: example.Status }]
        exit: kafka0
        with: { capability: produce, topic: zstatus-requests, reply-to: zreplies }
      - when: [{ service: example.Bin, metadata: { custom-binary: { base64: AQID } } }]
        exit: kafka0
        with: { capability: produce, topic: bin-requests }
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: echo-requests, reply-to: zreplies }
      - when: [{ service: example.Mirror }]
        exit: kafka0
        with: { capability: produce, topic: mirror, reply-to: mirror }
limits: { reply-timeout: 5s }
`

// zillaStatusResponder ends each call as a Zilla responder would: message
// "<code>:<text>" ends it with zilla:status and zilla:message, "bare" with
// a null-value reply and no status header; the half-close gets no reply.
func zillaStatusResponder(_ context.Context, req *responder.Request) ([]responder.Reply, error) {
	if req.Value == nil {
		return nil, nil
	}
	v := string(req.Value)
	if v == "bare" {
		return []responder.Reply{{}}, nil
	}
	code, msg, _ := strings.Cut(v, ":")
	if _, err := strconv.Atoi(code); err != nil {
		return nil, err
	}
	return []responder.Reply{{Headers: []responder.Header{
		{Key: "zilla:status", Value: []byte(code)}, {Key: "zilla:message", Value: []byte(msg)},
	}}}, nil
}

func startZillaGRPC(t *testing.T) *env {
	return startEnv(t, zillaGRPCConfig, withResponders(
		responder.Options{Topic: "zstatus-requests", Handler: zillaStatusResponder, DedupKey: responder.GRPCDedupKey,
			CorrelationHeader: "zilla:correlation-id", ReplyToHeader: "zilla:reply-to"},
		responder.Options{Topic: "echo-requests", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey,
			CorrelationHeader: "zilla:correlation-id", ReplyToHeader: "zilla:reply-to"},
	))
}

// A responder built for Zilla ends calls with zilla:status and
// zilla:message: with the correlation headers named zilla:*, those are the
// call's status; a terminal reply without a status header ends the call OK.
func TestZillaResponderStatusHeaders(t *testing.T) {
	t.Parallel()
	e := startZillaGRPC(t)
	ctx := ctxFor(t, 30*time.Second)
	for _, tc := range []struct {
		msg  string
		code codes.Code
		text string
	}{
		{"9:precondition failed", codes.FailedPrecondition, "precondition failed"},
		{"0:", codes.OK, ""},
		{"bare", codes.OK, ""},
	} {
		// A stream, not Invoke: grpc-go refuses a unary answer without a
		// message on its own (cardinality), whatever the status.
		st, err := e.grpcConn().NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
			"/example.Status/Call", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(&rawMessage{b: []byte(tc.msg)}); err != nil {
			t.Fatal(err)
		}
		if n, s := endStatus(st); n != 0 || s.Code() != tc.code || s.Message() != tc.text {
			t.Errorf("%q: %d messages, %v %q, want %v %q", tc.msg, n, s.Code(), s.Message(), tc.code, tc.text)
		}
	}
}

// Zilla's metadata condition `custom-binary: {base64: AQID}` matches the
// binary metadata custom-binary-bin, as Zilla's does.
func TestZillaBinaryMetadataCondition(t *testing.T) {
	t.Parallel()
	e := startZillaGRPC(t)
	ctx := ctxFor(t, 30*time.Second)
	call := func(ctx context.Context) error {
		return e.grpcConn().Invoke(ctx, "/example.Bin/Send", &rawMessage{b: []byte("m")}, &rawMessage{}, grpc.ForceCodecV2(rawCodec{}))
	}
	if err := call(metadata.AppendToOutgoingContext(ctx, "custom-binary-bin", "\x01\x02\x03")); err != nil {
		t.Fatalf("matching metadata: %v", err)
	}
	if err := call(metadata.AppendToOutgoingContext(ctx, "custom-binary-bin", "\x01\x02")); status.Code(err) != codes.Unimplemented {
		t.Fatalf("other bytes: %v, want UNIMPLEMENTED (no route)", err)
	}
	if got := e.readTopic("bin-requests"); len(got) != 1 || string(got[0].Value) != "m" {
		t.Fatalf("records %v, want the matching call's only", got)
	}
}

// Envoy adds x-request-id and x-forwarded-proto: they reach the request
// records as meta:* (documented), and the demo echo responder does not send
// them back as response metadata.
func TestEnvoyAddedHeadersNotEchoed(t *testing.T) {
	t.Parallel()
	e := startZillaGRPC(t)
	ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "custom", "c")
	var hdr metadata.MD
	var out rawMessage
	if err := e.grpcConn().Invoke(ctx, "/example.Echo/Say", &rawMessage{b: []byte("hi")}, &out, grpc.ForceCodecV2(rawCodec{}), grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if string(out.b) != "hi" || len(hdr.Get("custom")) != 1 {
		t.Fatalf("echo %q, metadata %v", out.b, hdr)
	}
	for _, name := range []string{"x-request-id", "x-forwarded-proto"} {
		if v := hdr.Get(name); len(v) != 0 {
			t.Errorf("the echo sent %s back: %v", name, v)
		}
	}
	recs := e.readTopic("echo-requests")
	if len(recs) == 0 {
		t.Fatal("no request record")
	}
	if _, ok := recHeader(recs[0], "meta:x-request-id"); !ok {
		t.Errorf("the request record lacks meta:x-request-id (documented as forwarded)")
	}
}

// The processor has no message descriptors, so it cannot know a method is
// unary: 2 messages on a unary method are 2 records (and 2 echoes); none is
// the end record alone, answered as the responder decides. Documented in docs/from-zilla.md.
func TestUnaryCardinalityIsTheClientsAndResponders(t *testing.T) {
	t.Parallel()
	e := startZillaGRPC(t)
	ctx := ctxFor(t, 30*time.Second)
	bidi := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	st, err := e.grpcConn().NewStream(ctx, bidi, "/example.Echo/Say", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"one", "two"} {
		if err := st.SendMsg(&rawMessage{b: []byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		var m rawMessage
		err := st.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, string(m.b))
	}
	if strings.Join(got, ",") != "one,two" {
		t.Fatalf("two messages on a unary method: echoes %q", got)
	}
	pollUntil(t, "two message records and the end record", func() bool { return e.endOffsets("echo-requests") == 3 })

	st, err = e.grpcConn().NewStream(ctx, bidi, "/example.Echo/Say", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if n, s := endStatus(st); n != 0 || s.Code() != codes.OK {
		t.Fatalf("no message: %d messages, %v", n, s)
	}
	// Only the end record: the responder (here the echo, which ends it OK)
	// decides what a call without a message means.
	recs := e.readTopic("echo-requests")
	if len(recs) != 4 || recs[3].Value != nil {
		t.Fatalf("no message wrote %d records, want the end record only", len(recs)-3)
	}
}

// Zilla's echo pattern: reply-to is the request topic, so the request
// records are the replies. The caller's own metadata comes back as the
// response's (headers and trailers), but not what only a request means:
// Envoy's x-request-id, the browser's origin, the idempotency key.
func TestMirrorRepliesLeaveRequestOnlyMetadataOut(t *testing.T) {
	t.Parallel()
	e := startZillaGRPC(t)
	ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "custom", "c", "origin", "http://app.example", "idempotency-key", "mirror-1")
	var hdr, trl metadata.MD
	var out rawMessage
	if err := e.grpcConn().Invoke(ctx, "/example.Mirror/Say", &rawMessage{b: []byte("hi")}, &out, grpc.ForceCodecV2(rawCodec{}), grpc.Header(&hdr), grpc.Trailer(&trl)); err != nil {
		t.Fatal(err)
	}
	if string(out.b) != "hi" || len(hdr.Get("custom")) != 1 || len(trl.Get("custom")) != 1 {
		t.Fatalf("echo %q, headers %v, trailers %v: want the message and custom in both", out.b, hdr, trl)
	}
	for _, name := range []string{"x-request-id", "origin", "idempotency-key"} {
		if len(hdr.Get(name)) != 0 || len(trl.Get(name)) != 0 {
			t.Errorf("%s came back: headers %v, trailers %v", name, hdr.Get(name), trl.Get(name))
		}
	}
}
