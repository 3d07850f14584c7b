package e2e_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// contractConfig has a request-reply route of each binding and no
// responder: the test writes the replies a service would, after reading
// the request records back, which takes seconds on a loaded machine: the
// reply timeout leaves room for it (2 s did not).
const contractConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: /c }]
        exit: kafka0
        with: { capability: produce, topic: contract-requests, reply-to: contract-replies }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: contract-grpc, reply-to: contract-grpc-replies }
limits: { reply-timeout: 8s, kafka-timeout: 5s }
`

// What docs/service-contract.md tells a service about replies: the
// correlation header identifies a reply, not the record key; a zero-length
// reply value is an empty gRPC message, a null one ends the call.
func TestServiceContractReplies(t *testing.T) {
	t.Parallel()
	e := startEnv(t, contractConfig)

	// A reply keyed by the correlation id but without the header is not
	// the request's: it is counted, and the request times out.
	before := counter(t, e.dev.Processor, "kafka_ext_proc_reply_index_records_without_correlation_total")
	answered := make(chan string, 1)
	go func() {
		resp, body := e.request(e.h1, "POST", "/c", `{"n":1}`, "content-type", "application/json")
		answered <- resp.Status + " " + body
	}()
	pollUntil(t, "the request record", func() bool { return len(e.readTopic("contract-requests")) == 1 })
	cid, _ := recHeader(e.readTopic("contract-requests")[0], "gateway:correlation-id")
	e.put("contract-replies", 0, cid, []byte(`{"ok":true}`), ":status", "201")
	pollUntil(t, "the reply without the header counted", func() bool {
		return counter(t, e.dev.Processor, "kafka_ext_proc_reply_index_records_without_correlation_total") == before+1
	})
	if got := <-answered; !strings.HasPrefix(got, "504 ") || !strings.Contains(got, "no reply within limits.reply-timeout") {
		t.Errorf("a reply keyed by the correlation id, without its header: %s, want 504", got)
	}

	// A zero-length value is an empty message; the null value ends the
	// call with its status.
	ctx := ctxFor(t, 30*time.Second)
	st := sendAll(ctx, t, e.grpcConn(), "/example.Echo/Say", false, "\x0a\x02hi")
	pollUntil(t, "the call's records", func() bool { return len(e.readTopic("contract-grpc")) == 2 })
	gcid, _ := recHeader(e.readTopic("contract-grpc")[0], "gateway:correlation-id")
	if v := e.readTopic("contract-grpc")[0].Value; string(v) != "\x0a\x02hi" {
		t.Errorf("request record value %q, want the bare protobuf message", v)
	}
	e.put("contract-grpc-replies", 0, gcid, []byte{}, "gateway:correlation-id", gcid)
	e.put("contract-grpc-replies", 0, gcid, nil, "gateway:correlation-id", gcid, "gateway:status", "0")
	msgs, err := recvAll(st)
	if err != nil || len(msgs) != 1 || msgs[0] != "" {
		t.Errorf("an empty reply value, then the end: %q %v, want one empty message and OK", msgs, err)
	}

	// A status with a message and trailers.
	st = sendAll(ctx, t, e.grpcConn(), "/example.Echo/Say", false, "\x0a\x02no")
	pollUntil(t, "the second call's records", func() bool { return len(e.readTopic("contract-grpc")) == 4 })
	gcid, _ = recHeader(e.readTopic("contract-grpc")[2], "gateway:correlation-id")
	e.put("contract-grpc-replies", 0, gcid, nil, "gateway:correlation-id", gcid, "gateway:status", "5", "gateway:message", "not here", "meta:x-why", "gone")
	if n, s := endStatus(st); n != 0 || s.Code() != codes.NotFound || s.Message() != "not here" {
		t.Errorf("a terminal reply with status 5: %d messages, %v", n, s)
	}
	if tr := st.Trailer().Get("x-why"); len(tr) != 1 || tr[0] != "gone" {
		t.Errorf("trailers %v, want x-why: gone", st.Trailer())
	}
}
