package models

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzJSONTree holds parseJSON to what jsonschema.UnmarshalJSON (the
// parser jsonschema's own loader uses) gives: the same tree for every body
// both accept, and a parse error for every body it refuses.
func FuzzJSONTree(f *testing.F) {
	for _, s := range []string{
		`{"name":"fountain pen","qty":3,"note":"gift wrap, please"}`,
		` { "a" : [ 1 , -2.5e+3 , 0.0E-1 , true , false , null , { } , [ ] ] , "a" : "last" } `,
		`"esc\"aped \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00 \udc00"`,
		"\"bad utf-8 \xff\xfe end\"",
		"{\"k\xc3\":\"v\xe2\x82\"}",
		`[[[[]]],{"":{"":""}}]`,
		`12345678901234567890123456789`,
		`-0`, `1e400`, "\t\n\r 7 \n",
		`{"a":1}x`, `{"a":1} {}`, `[1,]`, `{"a"}`, `01`, `"\x"`, ``, `nul`, `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		got, err := parseJSON(b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: tree %#v, encoding/json's %#v", b, got, want)
		}
		if err != nil && KindOf(err) != KindParse {
			t.Fatalf("%q: %v is not a parse error", b, err)
		}
	})
}

// TestJSONTreeTypes checks the types the validator switches on: a tree of
// map[string]any, []any, string, json.Number, bool and nil.
func TestJSONTreeTypes(t *testing.T) {
	got, err := parseJSON([]byte(`{"o":{},"a":[],"s":"x","n":1.5,"t":true,"z":null}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"o": map[string]any{}, "a": []any{}, "s": "x", "n": json.Number("1.5"), "t": true, "z": nil}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}
