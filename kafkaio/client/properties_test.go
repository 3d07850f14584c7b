package client

import (
	"strings"
	"testing"
)

// librdkafka's own checks, without a broker: every refused property is
// named, the good ones are not.
func TestCheckPropertiesAsLibrdkafka(t *testing.T) {
	errs := CheckProperties(map[string]string{
		"bootstrap.servers": "localhost:9092",
		"security.protocol": "SASL_SSSL",
		"linger.ms":         "soon",
		"lingr.ms":          "5",
		"compression.type":  "zstd",
		"sasl.mechanism":    "SCRAM-SHA-512",
		"client.id":         "mine",
	})
	got := map[string]string{}
	for _, e := range errs {
		got[e.Property] = e.Msg
		t.Logf("%s: %s", e.Property, e.Msg)
	}
	for _, want := range []string{"security.protocol", "linger.ms", "lingr.ms"} {
		if _, ok := got[want]; !ok {
			t.Errorf("%s was not refused", want)
		}
	}
	if len(errs) != 3 {
		t.Errorf("%d errors, want 3", len(errs))
	}
	// linger.ms is librdkafka's alias of queue.buffering.max.ms: the error
	// names the alias, and is still tied to the property the user wrote.
	if !strings.Contains(got["linger.ms"], "Invalid value") || !strings.Contains(got["lingr.ms"], "No such configuration property") {
		t.Errorf("messages: %q", got)
	}

	if errs := CheckProperties(map[string]string{"bootstrap.servers": "x:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p", "linger.ms": "5"}); len(errs) != 0 {
		t.Errorf("good properties refused: %v", errs)
	}
}

func TestDefaultClientIDIsSetAndOverridable(t *testing.T) {
	cm := Config(map[string]string{}, 0)
	if got := (*cm)["client.id"]; got != DefaultClientID() || !strings.HasPrefix(DefaultClientID(), "kafka-ext-proc-") {
		t.Errorf("client.id = %v, DefaultClientID %q", got, DefaultClientID())
	}
	cm = Config(map[string]string{"client.id": "mine"}, 0)
	if got := (*cm)["client.id"]; got != "mine" {
		t.Errorf("client.id = %v, want mine", got)
	}
}
