package models

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/avro"
)

// avroCodec converts between JSON and Avro binary with one writer schema.
type avroCodec struct {
	schema *avro.Schema
	root   *avro.SchemaNode
	named  map[string]*avro.SchemaNode // records by full name, for references
}

func compileAvro(_ context.Context, subject string, s Schema) (codec, error) {
	// Referenced named types are parsed first into one cache, as the
	// registry's references require.
	var cache avro.SchemaCache
	for _, d := range s.Deps {
		if _, err := cache.Parse(d.Text); err != nil {
			return nil, &SchemaError{Subject: subject + " reference " + d.Name, Err: err}
		}
	}
	sch, err := cache.Parse(s.Text)
	if err != nil {
		se := &SchemaError{Subject: subject, Err: err}
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			se.Line, se.Column = lineCol(s.Text, syn.Offset-1)
		}
		return nil, se
	}
	c := avroCodec{schema: sch, root: sch.Root(), named: map[string]*avro.SchemaNode{}}
	c.indexNames(c.root, "")
	return c, nil
}

// indexNames records the named records under n by full name (and short name).
func (c avroCodec) indexNames(n *avro.SchemaNode, ns string) {
	switch n.Type {
	case "record", "error":
		if n.Namespace != "" {
			ns = n.Namespace
		}
		full := n.Name
		if !strings.Contains(full, ".") && ns != "" {
			full = ns + "." + full
		}
		if _, ok := c.named[full]; ok {
			return
		}
		c.named[full] = n
		c.named[n.Name] = n
		for i := range n.Fields {
			c.indexNames(&n.Fields[i].Type, ns)
		}
	case "array":
		if n.Items != nil {
			c.indexNames(n.Items, ns)
		}
	case "map":
		if n.Values != nil {
			c.indexNames(n.Values, ns)
		}
	case "union":
		for i := range n.Branches {
			c.indexNames(&n.Branches[i], ns)
		}
	}
}

// unknownKeys reports object keys the schema does not declare, which the
// Avro JSON decoder drops silently: a gateway must not lose data a client
// sent. v is valid JSON the decoder already accepted.
func (c avroCodec) unknownKeys(e *Error, n *avro.SchemaNode, v any, path []string) {
	if len(path) > 64 {
		return
	}
	if r, ok := c.named[n.Type]; ok && n.Type != "record" {
		n = r // a reference to a named record
	}
	switch n.Type {
	case "record", "error":
		c.unknownFields(e, n, v, path)
	case "array":
		if arr, ok := v.([]any); ok && n.Items != nil {
			for i, x := range arr {
				c.unknownKeys(e, n.Items, x, append(path, strconv.Itoa(i)))
			}
		}
	case "map":
		if obj, ok := v.(map[string]any); ok && n.Values != nil {
			for k, x := range obj {
				c.unknownKeys(e, n.Values, x, append(path, k))
			}
		}
	case "union":
		c.unknownInUnion(e, n, v, path)
	}
}

// unknownFields reports the keys of a record's object that are not its
// fields, and the unknown keys within its fields' values.
func (c avroCodec) unknownFields(e *Error, n *avro.SchemaNode, v any, path []string) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, fv := range obj {
		f := field(n, k)
		if f == nil {
			e.addViolation(Violation{Pointer: "#" + pointer(append(path, k)), Detail: "not a field of record " + n.Name})
			continue
		}
		c.unknownKeys(e, &f.Type, fv, append(path, k))
	}
}

// unknownInUnion reports the unknown keys of a union's object, against the
// branch it names or, bare, the branch it fits.
func (c avroCodec) unknownInUnion(e *Error, n *avro.SchemaNode, v any, path []string) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	// Tagged: {"branch name": value}.
	if len(obj) == 1 {
		for k, x := range obj {
			if b := branchNamed(n, k); b != nil {
				c.unknownKeys(e, b, x, append(path, k))
				return
			}
		}
	}
	// Bare: the first record branch that declares every key, else the
	// first record or map branch reports.
	var first *avro.SchemaNode
	for i := range n.Branches {
		b := &n.Branches[i]
		if r, ok := c.named[b.Type]; ok && b.Type != "record" {
			b = r
		}
		if b.Type == "map" {
			return
		}
		if b.Type != "record" {
			continue
		}
		if first == nil {
			first = b
		}
		probe := &Error{}
		c.unknownKeys(probe, b, v, path)
		if len(probe.Violations) == 0 {
			return
		}
	}
	if first != nil {
		c.unknownKeys(e, first, v, path)
	}
}

// branchNamed is the union's branch a tagged value names: by type, name or
// full name.
func branchNamed(n *avro.SchemaNode, name string) *avro.SchemaNode {
	for i := range n.Branches {
		if b := &n.Branches[i]; b.Type == name || b.Name == name || (b.Namespace+"."+b.Name) == name {
			return b
		}
	}
	return nil
}

func field(n *avro.SchemaNode, name string) *avro.SchemaField {
	for i := range n.Fields {
		if n.Fields[i].Name == name {
			return &n.Fields[i]
		}
	}
	return nil
}

// avroError turns an encode or decode error into violations: the dotted
// field path of a semantic error becomes the pointer.
func avroError(kind Kind, err error) *Error {
	ptr := "#"
	var se *avro.SemanticError
	if errors.As(err, &se) && se.Field != "" {
		ptr += "/" + strings.ReplaceAll(pointerEscaper.Replace(se.Field), ".", "/")
	}
	detail := err.Error()
	// The library's prefixes repeat the path the pointer already says.
	if i := strings.LastIndex(detail, "avro json: "); i >= 0 {
		detail = detail[i+len("avro json: "):]
	} else {
		detail = strings.TrimPrefix(detail, "avro: ")
	}
	return &Error{Kind: kind, Violations: []Violation{{Pointer: ptr, Detail: detail}}, Err: err}
}

func (c avroCodec) decode(payload []byte) (any, error) {
	var v any
	rest, err := c.schema.Decode(payload, &v)
	if err != nil {
		return nil, avroError(KindParse, err)
	}
	if len(rest) > 0 {
		return nil, parseError("", "#", "bytes after the Avro value", nil)
	}
	return v, nil
}

func (c avroCodec) validate(payload []byte, _ []int) error {
	_, err := c.decode(payload)
	return err
}

func (c avroCodec) fromJSON(dst, src []byte) ([]byte, error) {
	// A JSON syntax error is "does not parse"; anything DecodeJSON refuses
	// in valid JSON is a schema violation.
	if !json.Valid(src) {
		_, err := parseJSON(src) // for the position
		return dst, err
	}
	var v any
	if err := c.schema.DecodeJSON(src, &v); err != nil {
		return dst, avroError(KindInvalid, err)
	}
	raw, err := parseJSON(src)
	if err != nil {
		return dst, err
	}
	e := &Error{Kind: KindInvalid}
	c.unknownKeys(e, c.root, raw, make([]string, 0, 8))
	if len(e.Violations) > 0 {
		slices.SortFunc(e.Violations, func(a, b Violation) int { return strings.Compare(a.Pointer, b.Pointer) })
		return dst, e
	}
	out, err := c.schema.AppendEncode(dst, v)
	if err != nil {
		return dst, avroError(KindInvalid, err)
	}
	return out, nil
}

func (c avroCodec) toJSON(dst, payload []byte, _ []int) ([]byte, error) {
	v, err := c.decode(payload)
	if err != nil {
		return dst, err
	}
	out, err := c.schema.AppendEncodeJSON(dst, v)
	if err != nil {
		return dst, avroError(KindParse, err)
	}
	return out, nil
}

func (avroCodec) index() []int { return nil }
