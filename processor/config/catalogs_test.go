package config

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/models"
)

// TestTopicModelsBuilt: the loader builds each topic's models from its
// catalog, globs cover templated topics, and the built models check values.
func TestTopicModelsBuilt(t *testing.T) {
	f := filepath.Join("testdata", "valid", "models.yaml")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(f, data, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Close()
	k := cfg.Kafka["kafka0"]
	if _, ok := k.Properties["topics"]; ok {
		t.Error("topics reached the librdkafka properties")
	}
	if got := len(cfg.Registries()); got != 1 {
		t.Errorf("registries: got %d, want 1", got)
	}
	items := k.Models("items")
	if items == nil || items.Key == nil || items.Value == nil {
		t.Fatalf("items: %+v", items)
	}
	ctx := context.Background()
	if _, err := items.Key.Encode(ctx, nil, []byte("Not Valid")); models.KindOf(err) != models.KindInvalid {
		t.Errorf("key \"Not Valid\": got %v, want a violation of the pattern", err)
	}
	if _, err := items.Value.Encode(ctx, nil, []byte(`{"name": 5}`)); models.KindOf(err) != models.KindInvalid {
		t.Errorf("value with a numeric name: got %v, want a violation", err)
	}
	orders := k.Models("orders")
	out, err := orders.Value.Encode(ctx, nil, []byte(`{"id": "a", "qty": 2}`))
	if err != nil {
		t.Fatalf("orders: %v", err)
	}
	// Avro binary, unframed (a filesystem catalog): "a" as length 1 (zigzag
	// 02) and its byte, then 2 (zigzag 04).
	if string(out) != "\x02a\x04" {
		t.Errorf("orders: got %x, want 026104", out)
	}
	back, err := orders.Value.Decode(ctx, nil, out)
	if err != nil || string(back) != `{"id":"a","qty":2}` {
		t.Errorf("orders round trip: %s, %v", back, err)
	}
	if m := k.Models("events-7"); m == nil || m.Name != "events-*" {
		t.Errorf("events-7: got %+v, want the events-* entry", m)
	}
	if m := k.Models("other"); m != nil {
		t.Errorf("other: got %+v, want none", m)
	}
}
