package kafkaio

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/testpki"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
)

// librdkafka's words for each failure, as seen from kfake and from Kafka.
func TestConnectCauseNamesSecureFailures(t *testing.T) {
	for _, c := range []struct {
		ev   kafka.Error
		want error
	}{
		{kafka.NewError(kafka.ErrAuthentication, "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256", false), ErrAuthentication},
		{kafka.NewError(kafka.ErrTransport, "sasl_ssl://127.0.0.1:1/bootstrap: SASL authentication error: SaslAuthenticateRequest failed: Local: Broker transport failure", false), ErrAuthentication},
		{kafka.NewError(kafka.ErrSsl, "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed", false), ErrTLS},
		{kafka.NewError(kafka.ErrTransport, "ssl://127.0.0.1:1/bootstrap: error:0A000086:SSL routines::certificate verify failed", false), ErrTLS},
		{kafka.NewError(kafka.ErrTransport, "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused", false), nil},
		{kafka.NewError(kafka.ErrAllBrokersDown, "1/1 brokers are down", false), nil},
	} {
		if got := connectCause(c.ev); got != c.want {
			t.Errorf("%v: %v, want %v", c.ev, got, c.want)
		}
	}
}

// CheckConnection reports the named cause while the broker refuses, and nil
// once the properties are right.
func TestCheckConnectionReportsTheCause(t *testing.T) {
	ca, err := testpki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("broker")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.Write(t.TempDir(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	b, err := embedded.Start(embedded.Options{
		TLS:   &tls.Config{Certificates: []tls.Certificate{srv.TLS}},
		Users: []embedded.User{{Mechanism: "SCRAM-SHA-512", Name: "u", Password: "p"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	props := func(password string) map[string]string {
		return map[string]string{"bootstrap.servers": b.Addr(), "security.protocol": "SASL_SSL", "ssl.ca.location": caFile,
			"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": password}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	err = CheckConnection(ctx, CheckOptions{Name: "k", Properties: props("wrong"), Interval: 200 * time.Millisecond, Report: func(err error) {
		last = err
		if errors.Is(err, ErrAuthentication) {
			cancel()
		}
	}})
	var ce *ConnectError
	if !errors.Is(err, context.Canceled) || !errors.As(last, &ce) || ce.Binding != "k" || !errors.Is(last, ErrAuthentication) {
		t.Fatalf("wrong password: returned %v, last report %v", err, last)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reports := 0
	if err := CheckConnection(ctx, CheckOptions{Name: "k", Properties: props("p"), Report: func(err error) { reports++; last = err }}); err != nil || last != nil || reports != 1 {
		t.Fatalf("right password: returned %v, %d reports, last %v", err, reports, last)
	}
}
