//go:build !nodev

package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// dev checks a configuration with unset variables by walking it as JSON; a
// kafka-grpc route over https holds a TLS configuration, which JSON cannot
// walk, and loading failed on it ("unsupported type").
func TestDevLoadsAKafkaGRPCRouteOverTLSWithUnsetVariables(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	src := `bindings:
  k: { type: kafka, kind: client, options: { bootstrap.servers: "${env:KAFKA_EXT_PROC_TEST_UNSET_A}" } }
  echo:
    type: kafka-grpc
    kind: remote_server
    routes:
      - when: [{ topic: echo-requests, reply-to: echo-responses, method: example.Echo/* }]
        exit: k
        with: { scheme: https, authority: "localhost:50051" }
`
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c, unset, err := loadForDev(cfg, nil)
	if err != nil || len(c.KafkaGRPC) != 1 || c.KafkaGRPC[0].Routes[0].TLS == nil || !slices.Equal(unset, []string{"KAFKA_EXT_PROC_TEST_UNSET_A"}) {
		t.Fatalf("loadForDev: %v, unset %q; want the configuration, its route's TLS and the one unset variable", err, unset)
	}
}
