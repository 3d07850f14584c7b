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

// validate on the imported http.kafka.oneway, before its trust store was
// converted: the PEM file it names is missing, said by name at its line
// with the keytool command the import wrote above it, not by librdkafka's
// TLS error code.
func TestValidateNamesAMissingCAFile(t *testing.T) {
	cfg, _ := importZilla(t, filepath.Join(zillaExamples, "http.kafka.oneway.yaml"))
	t.Setenv("KAFKA_BOOTSTRAP_SERVER", "localhost:9093")
	t.Setenv("SASL_USERNAME", "user")
	t.Setenv("SASL_PASSWORD", "secret")
	t.Chdir(t.TempDir()) // the relative tls/kafka.truststore.pem is not there
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"validate", "--config", cfg}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, stdout %s stderr %s", code, stdout.String(), stderr.String())
	}
	out := stderr.String()
	want := cfg + `:23:24: kafka property "ssl.ca.location": the file "tls/kafka.truststore.pem" is missing (librdkafka opens it from the working directory); the comment above it (line 22) has the command that writes it: keytool -exportcert -rfc -keystore tls/kafka.truststore.jks -storepass "$KEYSTORE_PASSWORD" -alias kafka > tls/kafka.truststore.pem`
	if !strings.Contains(out, want) || strings.Contains(out, "x509") {
		t.Errorf("stderr\n%s\nwant\n%s\nand no TLS error code", out, want)
	}

	// Once the file is there, it is librdkafka's to read.
	if err := os.MkdirAll("tls", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("tls/kafka.truststore.pem", []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"validate", "--config", cfg}, &stdout, &stderr); code != 1 || strings.Contains(stderr.String(), "is missing") || !strings.Contains(stderr.String(), "ssl.ca.location") {
		t.Errorf("with an unreadable CA file: exit %d, stderr %s", code, stderr.String())
	}
}
