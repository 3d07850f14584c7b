package stack

import (
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/testpki"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

const kafkaGRPCFile = `bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  echo-service:
    type: kafka-grpc
    kind: remote_server
    routes:
      - when: [{ topic: echo-requests, reply-to: echo-responses, method: example.Echo/* }]
        exit: kafka0
        with: { scheme: http, authority: "localhost:50051" }
`

// A reload may move the file's lines, but a change to a kafka-grpc binding
// needs a restart: its workers hold their group membership and
// connections.
func TestReloadRefusesAChangedKafkaGRPCBinding(t *testing.T) {
	parse := func(text string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("c.yaml", []byte(text), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	old := parse(kafkaGRPCFile)
	if err := sameKafkaGRPC(old, parse("# moved\n\n"+kafkaGRPCFile)); err != nil {
		t.Fatalf("the same bindings on other lines: %v", err)
	}
	err := sameKafkaGRPC(old, parse(strings.Replace(kafkaGRPCFile, "localhost:50051", "localhost:50052", 1)))
	if err == nil || err.Error() != "the kafka-grpc bindings changed: restart to apply" {
		t.Fatalf("a changed authority: %v", err)
	}
	// TLS: the same files are the same binding; other files are not.
	dir := t.TempDir()
	ca, err := testpki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	otherFile, err := ca.Write(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	withTLS := func(file string) *config.Config {
		return parse(strings.Replace(kafkaGRPCFile, `{ scheme: http, authority: "localhost:50051" }`,
			`{ scheme: https, authority: "localhost:50051", tls: { ca-file: `+file+` } }`, 1))
	}
	if err := sameKafkaGRPC(withTLS(caFile), withTLS(caFile)); err != nil {
		t.Fatalf("the same tls files: %v", err)
	}
	if err := sameKafkaGRPC(withTLS(caFile), withTLS(otherFile)); err == nil {
		t.Fatal("another ca-file: no error")
	}
}
