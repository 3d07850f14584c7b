package models

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// The per-request cost of each model in steady state (schemas cached), on
// a 60-byte order; compare with BenchmarkBaselineJSONValid, what a produce
// without a model checks. Registry benchmarks report the registry requests
// made per operation, which must be 0.

var benchOrder = []byte(`{"name":"fountain pen","qty":3,"note":"gift wrap, please"}`)

func BenchmarkBaselineJSONValid(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if !json.Valid(benchOrder) {
			b.Fatal("invalid")
		}
	}
}

func benchModel(b *testing.B, cfg Config) *Model {
	m, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Warm(context.Background()); err != nil {
		b.Fatal(err)
	}
	return m
}

func benchEncode(b *testing.B, m *Model, body []byte) []byte {
	ctx := context.Background()
	out, err := m.Encode(ctx, nil, body)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Encode(ctx, buf[:0], body); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

func benchDecode(b *testing.B, m *Model, rec []byte) {
	ctx := context.Background()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Decode(ctx, buf[:0], rec); err != nil {
			b.Fatal(err)
		}
	}
}

const benchOrderJSONSchema = `{"type":"object","required":["name","qty"],"additionalProperties":false,
 "properties":{"name":{"type":"string","minLength":1},"qty":{"type":"integer","minimum":1},"note":{"type":"string"}}}`

func BenchmarkJSONSchemaValidate(b *testing.B) {
	c, _ := NewInline("inline0", map[string]string{"order": benchOrderJSONSchema})
	benchEncode(b, benchModel(b, Config{Model: "json", Catalog: c, Ref: Ref{Subject: "order"}}), benchOrder)
}

// BenchmarkJSONSchemaParse and BenchmarkJSONSchemaValidateTree split
// BenchmarkJSONSchemaValidate in two: building the tree the validator
// walks, and jsonschema's Validate on a tree built once (the floor no
// parser can lower).
func BenchmarkJSONSchemaParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseJSON(benchOrder); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONSchemaValidateTree(b *testing.B) {
	c, _ := NewInline("inline0", map[string]string{"order": benchOrderJSONSchema})
	m := benchModel(b, Config{Model: "json", Catalog: c, Ref: Ref{Subject: "order"}})
	cd, _, err := m.configured(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	sch := cd.(jsonCodec).schema
	v, err := parseJSON(benchOrder)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := sch.Validate(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONSchemaInvalid(b *testing.B) {
	c, _ := NewInline("inline0", map[string]string{"order": benchOrderJSONSchema})
	m := benchModel(b, Config{Model: "json", Catalog: c, Ref: Ref{Subject: "order"}})
	body := []byte(`{"name":"","qty":0,"note":7,"extra":true}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Encode(context.Background(), nil, body); KindOf(err) != KindInvalid {
			b.Fatal(err)
		}
	}
}

// registryModel is a converting model on a loopback registry, warmed; the
// function returned counts the registry requests since.
func registryModel(b *testing.B, cfg Config, schema string, typ sr.SchemaType) (*Model, func() int64) {
	reg := newRegistry(b)
	reg.SeedSchema("orders-value", 1, 1, sr.Schema{Schema: schema, Type: typ})
	cat, _ := newCatalog(b, reg, RegistryOptions{})
	cfg.Catalog, cfg.Ref, cfg.View = cat, Ref{Subject: "orders-value"}, "json"
	m := benchModel(b, cfg)
	base := reg.requests.Load()
	return m, func() int64 { return reg.requests.Load() - base }
}

func BenchmarkAvroEncode(b *testing.B) {
	m, requests := registryModel(b, Config{Model: "avro"}, orderAvro, sr.TypeAvro)
	benchEncode(b, m, benchOrder)
	b.ReportMetric(float64(requests()), "registry-requests")
}

func BenchmarkAvroDecode(b *testing.B) {
	m, requests := registryModel(b, Config{Model: "avro"}, orderAvro, sr.TypeAvro)
	rec, err := m.Encode(context.Background(), nil, benchOrder)
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, m, rec)
	b.ReportMetric(float64(requests()), "registry-requests")
}

const benchOrderProto = `syntax = "proto3";
package shop;
message Order { string name = 1; int32 qty = 2; string note = 3; }
`

func BenchmarkProtobufEncode(b *testing.B) {
	m, requests := registryModel(b, Config{Model: "protobuf"}, benchOrderProto, sr.TypeProtobuf)
	benchEncode(b, m, benchOrder)
	b.ReportMetric(float64(requests()), "registry-requests")
}

func BenchmarkProtobufDecode(b *testing.B) {
	m, requests := registryModel(b, Config{Model: "protobuf"}, benchOrderProto, sr.TypeProtobuf)
	rec, err := m.Encode(context.Background(), nil, benchOrder)
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, m, rec)
	b.ReportMetric(float64(requests()), "registry-requests")
}

// BenchmarkProtobufDecodeNative is what a gRPC fetch stream's log tail does
// per record: check a framed record and take the frame off.
func BenchmarkProtobufDecodeNative(b *testing.B) {
	m, requests := registryModel(b, Config{Model: "protobuf"}, benchOrderProto, sr.TypeProtobuf)
	rec, err := m.Encode(context.Background(), nil, benchOrder)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var dst []byte
	for b.Loop() {
		if dst, err = m.DecodeNative(context.Background(), dst[:0], rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(requests()), "registry-requests")
}
