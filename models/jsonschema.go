package models

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// jsonCodec validates JSON against a compiled JSON Schema.
type jsonCodec struct{ schema *jsonschema.Schema }

// schemaBase is where schemas are placed for the compiler: references
// resolve against it, and nothing is loaded from anywhere else.
const schemaBase = "https://catalog.invalid/"

// noLoader refuses every URL the catalog did not supply: a `$ref` in a
// registry schema must not read local files or the network.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("%s: not among the schema's references", u)
}

func compileJSON(_ context.Context, subject string, s Schema) (codec, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	for _, d := range s.Deps {
		doc, err := parseSchemaJSON(subject+" reference "+d.Name, d.Text)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(d.Name)
		if err != nil {
			return nil, &SchemaError{Subject: subject, Err: fmt.Errorf("reference name %q: %w", d.Name, err)}
		}
		if err := c.AddResource(mustBase.ResolveReference(u).String(), doc); err != nil {
			return nil, &SchemaError{Subject: subject, Err: err}
		}
	}
	doc, err := parseSchemaJSON(subject, s.Text)
	if err != nil {
		return nil, err
	}
	loc := schemaBase + "schemas/" + strconv.Itoa(s.ID) + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, &SchemaError{Subject: subject, Err: err}
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, &SchemaError{Subject: subject, Err: err}
	}
	return jsonCodec{sch}, nil
}

var mustBase, _ = url.Parse(schemaBase + "schemas/")

// parseSchemaJSON parses a schema text, reporting a syntax error's line and
// column.
func parseSchemaJSON(subject, text string) (any, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		se := &SchemaError{Subject: subject, Err: err}
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			se.Line, se.Column = lineCol(text, syn.Offset-1) // Offset is just after the bad byte
		}
		return nil, se
	}
	return doc, nil
}

// parseJSON parses a value as jsonschema wants it (numbers as json.Number).
func parseJSON(src []byte) (any, error) {
	if json.Valid(src) {
		return jsonTree(src), nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		detail := "not JSON"
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			if line, col := lineCol(string(src), syn.Offset-1); line > 0 {
				detail = fmt.Sprintf("not JSON (line %d, column %d)", line, col)
			}
		}
		return nil, parseError("", "#", detail, err)
	}
	return v, nil
}

func (c jsonCodec) check(src []byte) error {
	v, err := parseJSON(src)
	if err != nil {
		return err
	}
	err = c.schema.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return invalidError("", "#", "does not validate", err)
	}
	e := &Error{Kind: KindInvalid, Err: err}
	// jsonschema walks a schema's properties in map order, so its causes come
	// in a different order each time: sorted, a client gets the same 422 for
	// the same body, and MaxViolations keeps the same ones.
	leaves := collect(nil, ve)
	slices.SortStableFunc(leaves, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Pointer, b.Pointer), strings.Compare(a.Keyword, b.Keyword), strings.Compare(a.Detail, b.Detail))
	})
	for _, v := range leaves {
		e.addViolation(v)
	}
	if len(e.Violations) == 0 {
		e.addViolation(Violation{Pointer: "#", Detail: ve.Error()})
	}
	return e
}

// collect appends the leaves of a validation error tree: each names one
// value and one keyword.
func collect(dst []Violation, ve *jsonschema.ValidationError) []Violation {
	if len(ve.Causes) == 0 {
		return append(dst, Violation{
			Pointer: "#" + pointer(ve.InstanceLocation),
			Detail:  ve.ErrorKind.LocalizedString(printer),
			Keyword: keyword(ve.SchemaURL, ve.ErrorKind.KeywordPath()),
		})
	}
	for _, c := range ve.Causes {
		dst = collect(dst, c)
	}
	return dst
}

// pointer renders path tokens as an RFC 6901 pointer.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

// keyword is the rule's location in the schema: the subschema's location
// (the fragment, within the schema itself; the reference's name plus the
// fragment in a referenced schema) and the keyword.
func keyword(schemaURL string, path []string) string {
	loc := strings.TrimPrefix(schemaURL, schemaBase+"schemas/")
	if i := strings.IndexByte(loc, '#'); i >= 0 && strings.HasSuffix(loc[:i], ".json") && isDigits(strings.TrimSuffix(loc[:i], ".json")) {
		loc = loc[i:] // the schema itself
	}
	return loc + pointer(path)
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// printer renders violations in English.
var printer = message.NewPrinter(language.English)

func (c jsonCodec) validate(payload []byte, _ []int) error { return c.check(payload) }

func (c jsonCodec) fromJSON(dst, src []byte) ([]byte, error) {
	if err := c.check(src); err != nil {
		return dst, err
	}
	return append(dst, src...), nil
}

func (c jsonCodec) toJSON(dst, payload []byte, _ []int) ([]byte, error) {
	return c.fromJSON(dst, payload)
}

func (jsonCodec) index() []int { return nil }
