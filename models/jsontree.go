package models

import (
	"encoding/json"
	"unicode/utf8"
)

// The tree a body is validated on is what jsonschema.UnmarshalJSON makes
// (encoding/json with UseNumber: map[string]any, []any, string,
// json.Number, bool, nil), built here in one pass over bytes json.Valid
// has accepted. encoding/json's reflection-driven decoder costs half of a
// validated produce; this builder allocates one string for the whole body
// and takes keys, strings and numbers as substrings of it, so only maps,
// slices and boxed values allocate. Bodies json.Valid refuses take
// encoding/json's path, whose syntax error gives the line and column.
// FuzzJSONTree holds the two to the same result on every input.

// jsonTree builds the tree of src, which must be valid JSON.
func jsonTree(src []byte) any {
	t := treeBuilder{s: string(src)}
	return t.value()
}

// treeBuilder walks valid JSON: it never checks syntax.
type treeBuilder struct {
	s string
	i int
}

func (t *treeBuilder) space() {
	for t.i < len(t.s) {
		switch t.s[t.i] {
		case ' ', '\t', '\n', '\r':
			t.i++
		default:
			return
		}
	}
}

func (t *treeBuilder) value() any {
	t.space()
	switch t.s[t.i] {
	case '{':
		t.i++
		m := make(map[string]any)
		t.space()
		if t.s[t.i] == '}' {
			t.i++
			return m
		}
		for {
			t.space()
			k := t.str()
			t.space()
			t.i++ // ':'
			// A repeated key keeps its last value, as in encoding/json.
			m[k] = t.value()
			t.space()
			c := t.s[t.i]
			t.i++ // ',' or '}'
			if c == '}' {
				return m
			}
		}
	case '[':
		t.i++
		a := make([]any, 0)
		t.space()
		if t.s[t.i] == ']' {
			t.i++
			return a
		}
		for {
			a = append(a, t.value())
			t.space()
			c := t.s[t.i]
			t.i++ // ',' or ']'
			if c == ']' {
				return a
			}
		}
	case '"':
		return t.str()
	case 't':
		t.i += len("true")
		return true
	case 'f':
		t.i += len("false")
		return false
	case 'n':
		t.i += len("null")
		return nil
	default:
		start := t.i
		for t.i < len(t.s) && isNumberByte(t.s[t.i]) {
			t.i++
		}
		return json.Number(t.s[start:t.i])
	}
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// str reads the string at t.i (its opening quote). A string without
// escapes in valid UTF-8 is a substring; any other is decoded by
// encoding/json itself, which replaces invalid UTF-8 with U+FFFD.
func (t *treeBuilder) str() string {
	start := t.i
	t.i++
	plain := true
	for {
		switch t.s[t.i] {
		case '"':
			t.i++
			lit := t.s[start:t.i]
			if plain && utf8.ValidString(lit) {
				return lit[1 : len(lit)-1]
			}
			var out string
			_ = json.Unmarshal([]byte(lit), &out) // a valid JSON string: no error
			return out
		case '\\':
			plain = false
			t.i += 2
		default:
			t.i++
		}
	}
}
