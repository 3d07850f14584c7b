package models

import (
	"bytes"
	"context"
	"reflect"
	"testing"
)

// EncodeValue gives what Encode gives, without copying a value the model
// does not change: the same bytes, the same errors.
func TestEncodeValue(t *testing.T) {
	ctx := context.Background()
	cat := inline(t, map[string]string{"json": orderJSONSchema, "avro": orderAvro})
	for _, tc := range []struct {
		name     string
		cfg      Config
		converts bool
	}{
		{"json schema", Config{Model: "json", Catalog: cat, Ref: Ref{Subject: "json"}}, false},
		{"string", Config{Model: "string", String: StringOptions{MaxLength: 40}}, false},
		{"avro view", Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "avro"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newModel(t, tc.cfg)
			for _, body := range []string{`{"name":"pen","qty":2}`, `{"name":"","qty":0,"extra":"a longer body than forty bytes"}`, `{"name":`} {
				src := []byte(body)
				want, wantErr := m.Encode(ctx, nil, src)
				got, err := m.EncodeValue(ctx, src)
				if !reflect.DeepEqual(err, wantErr) {
					t.Fatalf("%s: error %v, Encode's %v", body, err, wantErr)
				}
				if err != nil {
					if got != nil {
						t.Errorf("%s: %q with the error", body, got)
					}
					continue
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: %q, Encode's %q", body, got, want)
				}
				if same := &got[0] == &src[0]; same == tc.converts {
					t.Errorf("%s: the value itself returned: %v, want %v", body, same, !tc.converts)
				}
			}
		})
	}
}
