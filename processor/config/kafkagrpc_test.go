package config

import (
	"strings"
	"testing"
	"time"
)

const kafkaGRPCFile = `bindings:
  kafka:
    type: kafka
    kind: client
    options:
      bootstrap.servers: localhost:9092
  echo-service:
    type: kafka-grpc
    kind: remote_server
    options:
      acks: leader_only
      correlation:
        headers:
          correlation-id: zilla:correlation-id
    routes:
      - when:
          - topic: echo-requests
            reply-to: echo-responses
            method: example.Echo/*
        exit: kafka
        with:
          scheme: http
          authority: localhost:50051
          deadline: 5s
`

func TestKafkaGRPCBindingLoads(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte(kafkaGRPCFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.KafkaGRPC) != 1 || len(cfg.Bindings) != 0 {
		t.Fatalf("kafka-grpc bindings %d, proxy bindings %d; want 1 and 0", len(cfg.KafkaGRPC), len(cfg.Bindings))
	}
	b := cfg.KafkaGRPC[0]
	if b.Acks != AcksLeaderOnly {
		t.Errorf("acks %q", b.Acks)
	}
	// The grpc-kafka binding's defaults: the status headers follow the
	// correlation-id header's prefix.
	want := CorrelationHeaders{ReplyTo: "gateway:reply-to", CorrelationID: "zilla:correlation-id", Service: "gateway:service",
		Method: "gateway:method", Status: "zilla:status", Message: "zilla:message"}
	if b.Correlation != want {
		t.Errorf("correlation headers %+v, want %+v", b.Correlation, want)
	}
	r := b.Routes[0]
	if r.Exit != "kafka" || r.Scheme != "http" || r.Authority != "localhost:50051" || r.Deadline != 5*time.Second || len(r.When) != 1 {
		t.Fatalf("route %+v", r)
	}
	c := r.When[0]
	if !c.Matches("echo-requests", "echo-responses", "example.Echo", "Say") {
		t.Error("example.Echo/* does not match example.Echo/Say")
	}
	for _, miss := range [][4]string{
		{"other", "echo-responses", "example.Echo", "Say"},
		{"echo-requests", "other", "example.Echo", "Say"},
		{"echo-requests", "echo-responses", "example.Echo2", "Say"},
	} {
		if c.Matches(miss[0], miss[1], miss[2], miss[3]) {
			t.Errorf("matches %v", miss)
		}
	}
	if b.GroupID() != "kafka-ext-proc.kafka-grpc.echo-service" {
		t.Errorf("group id %q", b.GroupID())
	}
	if b.MaxCalls != 256 || b.MaxCallsPerPartition != 32 || b.IdempotencyMetadata != "idempotency-key" {
		t.Errorf("defaults: max-calls %d, max-calls-per-partition %d, idempotency metadata %q; want 256, 32, idempotency-key",
			b.MaxCalls, b.MaxCallsPerPartition, b.IdempotencyMetadata)
	}
}

func TestKafkaGRPCBindingBoundsAndIdempotencyMetadata(t *testing.T) {
	file := strings.Replace(kafkaGRPCFile, "      acks: leader_only\n",
		"      acks: leader_only\n      max-calls: 10\n      max-calls-per-partition: 4\n      idempotency: { metadata: X-Request-Key }\n", 1)
	cfg, err := Parse("c.yaml", []byte(file), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.KafkaGRPC[0]
	if b.MaxCalls != 10 || b.MaxCallsPerPartition != 4 || b.IdempotencyMetadata != "x-request-key" {
		t.Fatalf("max-calls %d, max-calls-per-partition %d, idempotency metadata %q; want 10, 4, x-request-key",
			b.MaxCalls, b.MaxCallsPerPartition, b.IdempotencyMetadata)
	}
}

func TestKafkaGRPCBindingErrors(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{"kind: remote_server", "kind: proxy", `c.yaml:9:11: kind of a kafka-grpc binding must be remote_server, got "proxy"`},
		{"exit: kafka", "exit: nowhere", `c.yaml:20:15: exit "nowhere" names no kafka binding (declared: kafka)`},
		{"exit: kafka", "exit: echo-service", `c.yaml:20:15: exit "echo-service" is a kafka-grpc binding: exit must name a kafka binding`},
		{"scheme: http", "scheme: h2", `c.yaml:22:19: unknown scheme "h2"; allowed: http (plaintext HTTP/2), https (TLS)`},
		{"deadline: 5s", "deadline: 5s\n          tls: { ca-file: ca.crt }", `c.yaml:25:11: tls needs scheme https`},
		{"scheme: http", "scheme: https\n          tls: { ca-file: missing.crt }", `c.yaml:23:27: ca-file: open missing.crt`},
		{"authority: localhost:50051", "authority: localhost", `c.yaml:23:22: authority "localhost" must be host:port`},
		{"method: example.Echo/*", "method: Echo", `c.yaml:19:21: method "Echo" must be pkg.Service/Method or pkg.Service/*`},
		{"acks: leader_only", "acks: some", `c.yaml:11:13: unknown acks "some"`},
		{"            reply-to: echo-responses\n", "", `c.yaml:17:13: missing required field "reply-to" in a kafka-grpc condition`},
		{"deadline: 5s", "deadline: soon", `c.yaml:24:21: deadline`},
		{"acks: leader_only", "max-calls: 0", `c.yaml:11:18: max-calls must be 1 to 1048576 calls (got 0)`},
		{"acks: leader_only", "max-calls: many", `c.yaml:11:18: max-calls`},
		{"acks: leader_only", "max-calls: 4\n      max-calls-per-partition: 8", `c.yaml:12:32: max-calls-per-partition (8) must not exceed max-calls (4)`},
		{"acks: leader_only", "idempotency: { metadata: \"\" }", `c.yaml:11:32: metadata`},
		{"        exit: kafka", "        exits: kafka", `c.yaml:20:9: unknown field "exits" in a kafka-grpc route (did you mean "exit"?); allowed: when, exit, with`},
	} {
		t.Run(tc.new, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(strings.Replace(kafkaGRPCFile, tc.old, tc.new, 1)), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
}
