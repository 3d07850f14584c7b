package models

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
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
				// What a client is told must be the same (the wrapped
				// validator error is the library's, its causes unordered).
				if (err == nil) != (wantErr == nil) || err != nil && !reflect.DeepEqual(problem(err), problem(wantErr)) {
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

// problem is what a client is told of a model error.
func problem(err error) any {
	var e *Error
	if errors.As(err, &e) {
		return e.Problem()
	}
	return err.Error()
}

// A body breaking several rules gets its violations in one order every
// time, sorted by pointer: jsonschema reports properties in map order.
func TestJSONSchemaViolationsInOneOrder(t *testing.T) {
	cat := inline(t, map[string]string{"json": orderJSONSchema})
	m := newModel(t, Config{Model: "json", Catalog: cat, Ref: Ref{Subject: "json"}})
	body := []byte(`{"name":"","qty":0,"extra":"x"}`)
	var first []Violation
	for i := range 50 {
		_, err := m.Encode(context.Background(), nil, body)
		got := problem(err).(Problem).Errors
		if len(got) < 3 {
			t.Fatalf("%d violations (%v), want 3", len(got), err)
		}
		if !slices.IsSortedFunc(got, func(a, b Violation) int { return strings.Compare(a.Pointer, b.Pointer) }) {
			t.Fatalf("violations not sorted by pointer: %+v", got)
		}
		if i == 0 {
			first = got
		} else if !reflect.DeepEqual(got, first) {
			t.Fatalf("run %d: %+v, first run %+v", i, got, first)
		}
	}
}
