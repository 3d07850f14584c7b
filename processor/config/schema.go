package config

//go:generate go run ./internal/genschema schema.json

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Schema returns the JSON Schema (draft 2020-12) of the configuration file,
// built from the definition in shape.go; schema.json, published for
// editors, is this text (go generate writes it, a test compares them). The
// loader checks more than the schema can (references between bindings,
// guards and path parameters); a test keeps the two in agreement on every
// structural rule.
func Schema() []byte {
	return newShape().schema()
}

// A section is one kind of object in the file. Its fields, in the order the
// loader's "allowed:" lists name them, are the one definition of which keys
// it may have: the decoder's field lists, the JSON Schema and the check of
// Describe all read them.
type section struct {
	// def names the section under the schema's $defs, where every use
	// refers to it; a section without one is written out where it is used.
	def    string
	doc    string
	fields []field
	// open sections accept keys besides their fields (kafka options pass
	// every other key to librdkafka).
	open bool
	// keywords are further JSON Schema keywords of the object, as a JSON
	// object (or an obj when they hold sections): what one field's schema
	// cannot say alone, such as "one of these two is required".
	keywords any
}

// A field is one key of a section.
type field struct {
	name string
	// schema is the JSON Schema of the value: JSON text, a *section or
	// *union (an object), or an obj or arr holding them.
	schema   any
	doc      string // the schema's description
	required bool
	// Exactly one of shown and hidden is set: shown is the column or key
	// under which Describe prints the field (describe_test.go finds it in
	// Describe's output); hidden says why Describe leaves it out. The
	// fields of a hidden field's object are left out with it.
	shown, hidden string
}

// names are the keys a section allows, in order.
func (s *section) names() []string {
	out := make([]string, len(s.fields))
	for i, f := range s.fields {
		out[i] = f.name
	}
	return out
}

// A union is an object whose shape one field selects (binding and guard
// type, a with's capability): each variant is a section.
type union struct {
	def      string
	key      string // the field that selects the variant
	required []string
	variants []variant
}

type variant struct {
	value   string
	section *section
}

// variant is the section of a value of the union's key, nil for an unknown one.
func (u *union) variant(value string) *section {
	for _, v := range u.variants {
		if v.value == value {
			return v.section
		}
	}
	return nil
}

// values are the values the union's key may take, in order.
func (u *union) values() []string { return variantValues(u.variants) }

func variantValues(vs []variant) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.value
	}
	return out
}

// names are the keys any variant allows, in order of first appearance: the
// loader lists them when the key is missing or unknown.
func (u *union) names() []string {
	var secs []*section
	for _, v := range u.variants {
		secs = append(secs, v.section)
	}
	return unionNames(secs...)
}

func unionNames(secs ...*section) []string {
	var out []string
	for _, s := range secs {
		for _, n := range s.names() {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// A named schema sits under $defs (a name, a duration, a template, the
// list of filters), referred to as {"$ref": "#/$defs/<name>"}.
type named struct {
	name   string
	schema any // as a field's
}

// obj is a JSON object that keeps its members in the order written, so the
// generated schema reads as its definition does.
type obj []member

type member struct {
	key string
	val any
}

// arr is a JSON array whose items may hold sections.
type arr []any

// schemaWriter renders a shape into a JSON Schema document.
type schemaWriter struct {
	defs    obj             // rendered $defs, in order of first use
	defined map[string]bool // names in defs, or being rendered
}

func (s *shape) schema() []byte {
	w := &schemaWriter{defined: map[string]bool{}}
	top := w.section(s.top)
	doc := obj{
		{"$schema", "https://json-schema.org/draft/2020-12/schema"},
		{"$id", "https://github.com/kafka-ext-proc/kafka-ext-proc/processor/config/schema.json"},
		{"title", "kafka-ext-proc configuration"},
	}
	doc = append(doc, top...)
	for _, v := range s.values {
		w.value(v)
	}
	doc = append(doc, member{"$defs", w.defs})
	var b bytes.Buffer
	writeJSON(&b, doc, "", 0)
	b.WriteByte('\n')
	return b.Bytes()
}

// js is JSON text inside an obj or arr, where a string is a JSON string.
type js string

// schemaOf renders a field's schema, a section's keywords or a named
// schema, where a plain string is JSON text.
func (w *schemaWriter) schemaOf(v any) any {
	if s, ok := v.(string); ok {
		return parseJSON(s)
	}
	return w.value(v)
}

// value renders a schema value: JSON text is parsed, sections and unions
// with a def become references (rendered once under $defs), others are
// written out in place.
func (w *schemaWriter) value(v any) any {
	switch v := v.(type) {
	case js:
		return parseJSON(string(v))
	case string, bool, int, json.Number:
		return v
	case *section:
		if v.def == "" {
			return w.section(v)
		}
		w.define(v.def, func() any { return w.section(v) })
		return obj{{"$ref", "#/$defs/" + v.def}}
	case *union:
		w.define(v.def, func() any { return w.union(v) })
		return obj{{"$ref", "#/$defs/" + v.def}}
	case *named:
		w.define(v.name, func() any { return w.schemaOf(v.schema) })
		return obj{{"$ref", "#/$defs/" + v.name}}
	case obj:
		out := make(obj, len(v))
		for i, m := range v {
			out[i] = member{m.key, w.value(m.val)}
		}
		return out
	case arr:
		out := make(arr, len(v))
		for i, x := range v {
			out[i] = w.value(x)
		}
		return out
	}
	panic(fmt.Sprintf("schema: cannot render %T", v))
}

// define renders a def the first time it is used. Its slot is taken before
// it is rendered, so the defs it uses come after it.
func (w *schemaWriter) define(name string, render func() any) {
	if w.defined[name] {
		return
	}
	w.defined[name] = true
	i := len(w.defs)
	w.defs = append(w.defs, member{key: name})
	w.defs[i].val = render()
}

func (w *schemaWriter) section(s *section) obj {
	o := obj{}
	if s.doc != "" {
		o = append(o, member{"description", s.doc})
	}
	o = append(o, member{"type", "object"})
	if !s.open {
		o = append(o, member{"additionalProperties", false})
	}
	var required []any
	props := obj{}
	for i, f := range s.fields {
		if slices.ContainsFunc(s.fields[:i], func(g field) bool { return g.name == f.name }) {
			panic("schema: field " + f.name + " twice in one section")
		}
		if f.required {
			required = append(required, f.name)
		}
		props = append(props, member{f.name, w.field(f)})
	}
	if required != nil {
		o = append(o, member{"required", arr(required)})
	}
	if s.keywords != nil {
		kw, ok := w.schemaOf(s.keywords).(obj)
		if !ok {
			panic("schema: the keywords of a section must be an object")
		}
		o = append(o, kw...)
	}
	return append(o, member{"properties", props})
}

func (w *schemaWriter) field(f field) any {
	v := w.schemaOf(f.schema)
	if f.doc == "" {
		return v
	}
	o, ok := v.(obj)
	if !ok {
		panic("schema: a field with a description needs an object schema: " + f.name)
	}
	return append(obj{{"description", f.doc}}, o...)
}

func (w *schemaWriter) union(u *union) obj {
	var allOf arr
	for _, v := range u.variants {
		allOf = append(allOf, obj{
			{"if", obj{{"required", arr{u.key}}, {"properties", obj{{u.key, obj{{"const", v.value}}}}}}},
			{"then", w.value(v.section)},
		})
	}
	required := make(arr, len(u.required))
	for i, r := range u.required {
		required[i] = r
	}
	return obj{
		{"type", "object"},
		{"required", required},
		{"properties", obj{{u.key, obj{{"enum", strs(u.values())}}}}},
		{"allOf", allOf},
	}
}

// strs is a JSON array of strings.
func strs(ss []string) arr {
	out := make(arr, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// parseJSON parses JSON text into obj, arr and scalars, keeping the order of
// object members. The text is the definition's own: a mistake in it is a
// programming error, which the schema tests find.
func parseJSON(text string) any {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err == nil && dec.More() {
		err = fmt.Errorf("text after the value")
	}
	if err != nil {
		panic(fmt.Sprintf("schema: %v in %s", err, text))
	}
	return v
}

func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := obj{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		a := arr{}
		for dec.More() {
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

// maxLine is how wide writeJSON lets a value be before it breaks it over lines.
const maxLine = 110

// writeJSON writes v indented by two spaces a level, keeping an object or
// array on one line when it fits; col is where v starts on its line.
func writeJSON(b *bytes.Buffer, v any, indent string, col int) {
	if flat := flatJSON(v); col+len(flat) <= maxLine {
		b.WriteString(flat)
		return
	}
	inner := indent + "  "
	switch v := v.(type) {
	case obj:
		b.WriteString("{\n")
		for i, m := range v {
			key := inner + scalarJSON(m.key) + ": "
			b.WriteString(key)
			writeJSON(b, m.val, inner, len(key))
			b.WriteString(comma(i, len(v)))
		}
		b.WriteString(indent + "}")
	case arr:
		b.WriteString("[\n")
		for i, x := range v {
			b.WriteString(inner)
			writeJSON(b, x, inner, len(inner))
			b.WriteString(comma(i, len(v)))
		}
		b.WriteString(indent + "]")
	default:
		b.WriteString(scalarJSON(v))
	}
}

func comma(i, n int) string {
	if i < n-1 {
		return ",\n"
	}
	return "\n"
}

// flatJSON is v on one line.
func flatJSON(v any) string {
	switch v := v.(type) {
	case obj:
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = scalarJSON(m.key) + ": " + flatJSON(m.val)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case arr:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = flatJSON(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return scalarJSON(v)
}

// scalarJSON encodes a string, number, boolean or null; '<', '>' and '&'
// stay as written (the schema is read by editors, not embedded in HTML).
func scalarJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("schema: %v", err))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
