package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const validateKafkaYAML = `bindings:
  kafka0:
    type: kafka
    kind: client
    options:
      bootstrap.servers: localhost:9092
      security.protocol: SASL_SSSL
      linger.ms: soon
      client.id: gw-1
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: /events }]
        exit: kafka0
        with: { capability: produce, topic: events }
`

// The validate command has librdkafka check the properties, without a
// broker, and points at each refused value.
func TestValidateRefusesLibrdkafkaProperties(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(validateKafkaYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"validate", "--config", bad}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, stdout %s", code, stdout.String())
	}
	out := stderr.String()
	t.Log(out)
	for _, want := range []string{
		bad + `:7:26: kafka property "security.protocol": librdkafka refuses "SASL_SSSL": Invalid value "SASL_SSSL" for configuration property "security.protocol"`,
		bad + `:8:18: kafka property "linger.ms": librdkafka refuses "soon": Invalid value for configuration property "queue.buffering.max.ms"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks\n  %s", want)
		}
	}
	if strings.Contains(out, "client.id") {
		t.Errorf("client.id was refused")
	}

	good := filepath.Join(dir, "good.yaml")
	fixed := strings.NewReplacer("SASL_SSSL", "PLAINTEXT", "soon", "5").Replace(validateKafkaYAML)
	if err := os.WriteFile(good, []byte(fixed), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"validate", "--config", good}, &stdout, &stderr); code != 0 {
		t.Fatalf("fixed file: exit %d: %s", code, stderr.String())
	}
}
