package models

import (
	"context"
	"testing"
)

// FuzzModels feeds arbitrary record values to framed Avro and Protobuf
// models and arbitrary bodies to converting ones: each answers with a
// value or a model *Error, never a panic or another error.
func FuzzModels(f *testing.F) {
	ctx := context.Background()
	cat, err := NewInline("inline0", map[string]string{"order": orderAvro, "event": eventProto, "json": orderJSONSchema})
	if err != nil {
		f.Fatal(err)
	}
	framed := true
	models := []*Model{}
	for _, cfg := range []Config{
		{Model: "avro", View: "json", Ref: Ref{Subject: "order"}},
		{Model: "protobuf", View: "json", Ref: Ref{Subject: "event"}, Record: "example.Event"},
		{Model: "json", Ref: Ref{Subject: "json"}},
	} {
		cfg.Catalog, cfg.Frame = cat, &framed
		m, err := New(ctx, cfg)
		if err != nil {
			f.Fatal(err)
		}
		models = append(models, m)
		rec, err := m.Encode(ctx, nil, []byte(`{"name":"pen","qty":2,"id":"e1"}`))
		if err == nil {
			f.Add(rec)
		}
	}
	f.Add([]byte(`{"name":"pen","qty":2}`))
	f.Add([]byte{0, 0, 0, 0, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range models {
			for _, op := range []func(context.Context, []byte, []byte) ([]byte, error){m.Decode, m.Encode} {
				if _, err := op(ctx, nil, b); err != nil && KindOf(err) == 0 {
					t.Fatalf("%s: error %v is not a model error", m.name, err)
				}
			}
		}
	})
}
