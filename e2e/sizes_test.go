package e2e_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

const sizesConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: /sizes }]
        exit: kafka0
        with: { capability: produce, topic: sizes }
      - when: [{ method: POST, path: /sizes-rr }]
        exit: kafka0
        with: { capability: produce, topic: sizes-rr, reply-to: sizes-replies }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Sizes }]
        exit: kafka0
        with: { capability: produce, topic: grpc-sizes }
`

// Under the default limits, a body of exactly limits.max-body (1 MiB) is
// written and reads back whole, one byte more is refused before Kafka
// (413 naming limits.max-body; gRPC RESOURCE_EXHAUSTED), and a record that
// librdkafka itself refuses for its size (headers from a peer with larger
// limits than Envoy's) is 413 naming message.max.bytes, never 502.
func TestMaxBodySizesAgree(t *testing.T) {
	t.Parallel()
	e := startEnv(t, sizesConfig)
	maxBody := int(config.DefaultLimits().MaxBody)
	if maxBody != 1<<20 {
		t.Fatalf("default max-body %d, want 1 MiB", maxBody)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), maxBody/16)

	resp, b := e.request(e.h1, "POST", "/sizes", string(body))
	if resp.StatusCode != 204 {
		t.Fatalf("a body of limits.max-body: %d %.200q, want 204", resp.StatusCode, b)
	}
	// Over HTTP/2: the 413 comes while the client is still sending, and on
	// HTTP/1.1 the connection then closes under the unsent rest (as Envoy's
	// does), so a client may see the reset before it reads the answer.
	resp, b = e.request(e.h2c, "POST", "/sizes", string(body)+"x")
	auditProblem(t, "one byte over limits.max-body", resp, b, 413, "limits.max-body")
	recs := e.readTopic("sizes")
	if len(recs) != 1 || !bytes.Equal(recs[0].Value, body) {
		t.Fatalf("%d records in sizes, want one holding the whole 1 MiB body", len(recs))
	}

	call := func(msg []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return e.grpcConn().Invoke(ctx, "/example.Sizes/Put", &rawMessage{b: msg}, &rawMessage{}, grpc.ForceCodecV2(rawCodec{}))
	}
	if err := call(body); err != nil {
		t.Fatalf("a gRPC message of limits.max-body: %v, want OK", err)
	}
	auditStatus(t, "a gRPC message one byte over", call(append(body, 'x')), codes.ResourceExhausted, "limits.max-body")
	if recs := e.readTopic("grpc-sizes"); len(recs) == 0 || !bytes.Equal(recs[0].Value, body) {
		t.Fatalf("%d records in grpc-sizes, want the 1 MiB message first", len(recs))
	}

	// A peer Envoy configured with a larger header limit: a request-reply
	// record holds the request headers too and is over the producer's
	// message.max.bytes.
	hdr := [][2]string{{":method", "POST"}, {":path", "/sizes-rr"}, {":authority", "sizes"}, {":scheme", "http"},
		{"x-big", strings.Repeat("h", int(config.DefaultLimits().RecordBytes()))}}
	st, detail, err := auditPeerReply(t, e, hdr, "small body")
	if err != nil || st != 413 || !strings.Contains(detail, "message.max.bytes (1179648 bytes)") || !strings.Contains(detail, "limits.max-body") {
		t.Errorf("a record over message.max.bytes: %d %q %v, want 413 naming message.max.bytes and limits.max-body", st, detail, err)
	}
	if n := e.endOffsets("sizes-rr"); n != 0 {
		t.Errorf("%d records in sizes-rr after the refused one, want none", n)
	}
}
