package models

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
)

const orderJSONSchema = `{
  "type": "object",
  "required": ["name", "qty"],
  "properties": {
    "name": {"type": "string", "minLength": 1},
    "qty": {"type": "integer", "minimum": 1},
    "tags": {"type": "array", "items": {"type": "string"}}
  },
  "additionalProperties": false
}`

const orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"name","type":"string"},
  {"name":"qty","type":"int"},
  {"name":"note","type":["null","string"],"default":null}]}`

// eventProto has Event second and a nested message, so message indexes
// other than the [0] shortcut are exercised; Event is wire-compatible with
// the generated example.Event the test decodes with.
const eventProto = `syntax = "proto3";
package example;
message Other { message Inner { int32 n = 1; } Inner inner = 1; }
message Event {
  string id = 1;
  string text = 2;
}
`

func newModel(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return m
}

func inline(t *testing.T, subjects map[string]string) *Static {
	t.Helper()
	c, err := NewInline("inline0", subjects)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantKind checks err is a model *Error of kind k and returns it.
func wantKind(t *testing.T, err error, k Kind) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T): want a *models.Error of kind %v", err, err, k)
	}
	if e.Kind != k {
		t.Fatalf("kind %v, want %v (%v)", e.Kind, k, e)
	}
	return e
}

func pointers(e *Error) []string {
	var ps []string
	for _, v := range e.Violations {
		ps = append(ps, v.Pointer)
	}
	return ps
}

func TestJSONSchemaInline(t *testing.T) {
	m := newModel(t, Config{Model: "json", Catalog: inline(t, map[string]string{"order": orderJSONSchema}), Ref: Ref{Subject: "order"}})
	ctx := context.Background()
	valid := []byte(`{"name":"pen","qty":2,"tags":["a"]}`)
	out, err := m.Encode(ctx, nil, valid)
	if err != nil || string(out) != string(valid) {
		t.Fatalf("valid: %q, %v; want the body unchanged", out, err)
	}
	if out, err := m.Decode(ctx, nil, valid); err != nil || string(out) != string(valid) {
		t.Fatalf("decode valid: %q, %v", out, err)
	}

	_, err = m.Encode(ctx, nil, []byte(`{"name":"","qty":0,"tags":[1],"extra":true}`))
	e := wantKind(t, err, KindInvalid)
	got := strings.Join(pointers(e), " ")
	for _, want := range []string{"#/name", "#/qty", "#/tags/0", "#"} {
		if !strings.Contains(" "+got+" ", " "+want+" ") {
			t.Errorf("violations at %q, want one at %s", got, want)
		}
	}
	for _, v := range e.Violations {
		if v.Detail == "" || v.Keyword == "" {
			t.Errorf("violation %+v: want a detail and a keyword", v)
		}
	}
	if e.Subject != "inline0/order@latest" {
		t.Errorf("subject %q", e.Subject)
	}
	p := e.Problem()
	if p.Status != 422 || p.Type != ProblemTypeInvalid || len(p.Errors) != len(e.Violations) || !strings.Contains(p.Detail, "4 violations") {
		t.Errorf("problem %+v", p)
	}

	_, err = m.Encode(ctx, nil, []byte("{\"name\":\n  \"pen\",,}"))
	e = wantKind(t, err, KindParse)
	if e.Kind.Status() != 400 || !strings.Contains(e.Violations[0].Detail, "line 2") {
		t.Errorf("parse error %+v: want 400 and the line", e.Violations)
	}
}

func TestViolationsCapped(t *testing.T) {
	m := newModel(t, Config{Model: "json", Catalog: inline(t, map[string]string{"n": `{"type":"array","items":{"type":"integer"}}`}), Ref: Ref{Subject: "n"}})
	body := "[" + strings.TrimSuffix(strings.Repeat(`"x",`, 30), ",") + "]"
	_, err := m.Encode(context.Background(), nil, []byte(body))
	e := wantKind(t, err, KindInvalid)
	if len(e.Violations) != MaxViolations || !e.Truncated || !strings.HasPrefix(e.Problem().Detail, "more than 20 violations") {
		t.Fatalf("%d violations, truncated %v, detail %q; want %d and truncated", len(e.Violations), e.Truncated, e.Problem().Detail, MaxViolations)
	}
	b, _ := json.Marshal(e.Problem())
	if strings.Contains(string(b), `"x"`) {
		t.Errorf("problem echoes the value: %s", b)
	}
}

func TestAvroInline(t *testing.T) {
	ctx := context.Background()
	cat := inline(t, map[string]string{"order": orderAvro})
	validate := newModel(t, Config{Model: "avro", Catalog: cat, Ref: Ref{Subject: "order"}})
	convert := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "order"}})

	bin, err := convert.Encode(ctx, nil, []byte(`{"name":"pen","qty":2,"note":"blue"}`))
	if err != nil {
		t.Fatal(err)
	}
	// Inline catalogs do not frame: the bare Avro record.
	if got := decodeOrder(t, bin); got != (order{"pen", 2, "blue", true}) {
		t.Fatalf("decoded %+v", got)
	}
	if _, err := validate.Decode(ctx, nil, bin); err != nil {
		t.Fatalf("validate-only decode of a valid record: %v", err)
	}
	if _, err := validate.Decode(ctx, nil, bin[:len(bin)-2]); KindOf(err) != KindParse {
		t.Fatalf("truncated record: %v, want a parse error", err)
	}
	js, err := convert.Decode(ctx, nil, bin)
	if err != nil || !jsonEqual(t, js, `{"name":"pen","qty":2,"note":"blue"}`) {
		t.Fatalf("to JSON: %s, %v", js, err)
	}

	_, err = convert.Encode(ctx, nil, []byte(`{"name":"pen","qty":2.5}`))
	e := wantKind(t, err, KindInvalid)
	if e.Violations[0].Pointer != "#/qty" {
		t.Errorf("violation %+v, want at #/qty", e.Violations[0])
	}
	_, err = convert.Encode(ctx, nil, []byte(`{"qty":2}`))
	wantKind(t, err, KindInvalid)
	// Keys the schema does not declare are refused, not dropped.
	_, err = convert.Encode(ctx, nil, []byte(`{"name":"pen","qty":2,"colour":"red","note":{"string":"x"}}`))
	if e := wantKind(t, err, KindInvalid); len(e.Violations) != 1 || e.Violations[0].Pointer != "#/colour" {
		t.Errorf("unknown key: %+v, want one violation at #/colour", e.Violations)
	}
	_, err = convert.Encode(ctx, nil, []byte(`{"name":`))
	wantKind(t, err, KindParse)
}

func TestProtobufInline(t *testing.T) {
	ctx := context.Background()
	cat := inline(t, map[string]string{"event": eventProto})
	convert := newModel(t, Config{Model: "protobuf", View: "json", Catalog: cat, Ref: Ref{Subject: "event"}, Record: "example.Event"})
	bin, err := convert.Encode(ctx, nil, []byte(`{"id":"e1","text":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	var ev example.Event
	if err := proto.Unmarshal(bin, &ev); err != nil || ev.GetId() != "e1" || ev.GetText() != "hello" {
		t.Fatalf("generated type read %v, %v", &ev, err)
	}
	js, err := convert.Decode(ctx, nil, bin)
	if err != nil || !jsonEqual(t, js, `{"id":"e1","text":"hello"}`) {
		t.Fatalf("to JSON: %s, %v", js, err)
	}
	_, err = convert.Encode(ctx, nil, []byte(`{"id":"e1","colour":"red"}`))
	e := wantKind(t, err, KindInvalid)
	if !strings.Contains(e.Violations[0].Detail, "unknown field") {
		t.Errorf("violation %+v", e.Violations[0])
	}
	_, err = convert.Encode(ctx, nil, []byte(`{"id":7}`))
	wantKind(t, err, KindInvalid)
	_, err = convert.Encode(ctx, nil, []byte(`{"id"`))
	wantKind(t, err, KindParse)

	validate := newModel(t, Config{Model: "protobuf", Catalog: cat, Ref: Ref{Subject: "event"}, Record: "example.Event"})
	if _, err := validate.Decode(ctx, nil, bin); err != nil {
		t.Fatalf("validate-only: %v", err)
	}
	// Field 1 with wire type 0 (varint) where a string is declared: the
	// parser keeps it as an unknown field, the model refuses it.
	_, err = validate.Decode(ctx, nil, []byte{0x08, 0x01})
	if e := wantKind(t, err, KindInvalid); e.Violations[0].Pointer != "#" {
		t.Fatalf("wrong wire type: %+v", e.Violations)
	}
	// A string field whose length runs past the end does not parse.
	if _, err := validate.Decode(ctx, nil, []byte{0x0a, 0x05, 'a'}); KindOf(err) != KindParse {
		t.Fatalf("truncated: %v, want a parse error", err)
	}
	// An undeclared field inside a nested message is found where it is.
	other := newModel(t, Config{Model: "protobuf", Catalog: cat, Ref: Ref{Subject: "event"}})
	_, err = other.Decode(ctx, nil, []byte{0x0a, 0x02, 0x18, 0x01}) // Other{inner: {field 3: 1}}
	if e := wantKind(t, err, KindInvalid); e.Violations[0].Pointer != "#/inner" {
		t.Fatalf("nested unknown field: %+v, want at #/inner", e.Violations)
	}
}

func TestPrimitives(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		cfg       Config
		ok, notOK []string
	}{
		{Config{Model: "string", String: StringOptions{MinLength: 2, MaxLength: 4, Pattern: "[a-z]+"}}, []string{"ab", "wxyz"}, []string{"a", "abcde", "AB", "\xff\xfe"}},
		{Config{Model: "int32"}, []string{"0", "-2147483648"}, []string{"2147483648", "1.5", "x", ""}},
		{Config{Model: "int64"}, []string{"9223372036854775807"}, []string{"9223372036854775808"}},
		{Config{Model: "double"}, []string{"1.5", "-2e10"}, []string{"one"}},
		{Config{Model: "float"}, []string{"1.5"}, []string{"1e40"}},
		{Config{Model: "boolean"}, []string{"true", "false"}, []string{"1", "True", "yes"}},
	}
	for _, c := range cases {
		m := newModel(t, c.cfg)
		for _, v := range c.ok {
			if _, err := m.Encode(ctx, nil, []byte(v)); err != nil {
				t.Errorf("%s %q: %v", c.cfg.Model, v, err)
			}
		}
		for _, v := range c.notOK {
			if _, err := m.Encode(ctx, nil, []byte(v)); KindOf(err) == 0 {
				t.Errorf("%s %q: accepted", c.cfg.Model, v)
			}
		}
	}
	if _, err := New(ctx, Config{Model: "int32", View: "json"}); err == nil {
		t.Error("a view on a primitive was accepted")
	}
	if _, err := New(ctx, Config{Model: "xml"}); err == nil {
		t.Error("an unknown model was accepted")
	}
}

func TestSchemaErrorsAtLoad(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		model, text, record string
		line, col           int // 0: no position expected
	}{
		{"json", "{\n  \"type\": \"object\",\n  \"properties\": {,}\n}", "", 3, 18},
		{"json", `{"type": "nonsense"}`, "", 0, 0},
		{"protobuf", "syntax = \"proto3\";\nmessage A {\n  strin x = 1;\n}\n", "", 3, 3},
		{"protobuf", eventProto, "example.Missing", 0, 0},
		{"avro", `{"type":"record","name":"R","fields":[{"name":"a","type":"nosuch"}]}`, "", 0, 0},
	}
	for _, c := range cases {
		_, err := New(ctx, Config{Model: c.model, Catalog: inline(t, map[string]string{"s": c.text}), Ref: Ref{Subject: "s"}, Record: c.record})
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s %q: error %v, want a *SchemaError", c.model, c.text, err)
			continue
		}
		if se.Line != c.line || (c.line != 0 && se.Column != c.col) {
			t.Errorf("%s: position %d:%d, want %d:%d (%v)", c.model, se.Line, se.Column, c.line, c.col, err)
		}
	}
}

func TestFilesystemCatalog(t *testing.T) {
	dir := t.TempDir()
	if err := writeFile(dir+"/order.avsc", orderAvro); err != nil {
		t.Fatal(err)
	}
	cat, err := NewFilesystem("files0", dir, map[string]string{"order": "order.avsc"})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "order"}})
	bin, err := m.Encode(context.Background(), nil, []byte(`{"name":"a","qty":1}`))
	if err != nil || decodeOrder(t, bin) != (order{name: "a", qty: 1}) {
		t.Fatalf("%x, %v", bin, err)
	}
	if _, err := NewFilesystem("files0", dir, map[string]string{"x": "missing.avsc"}); err == nil {
		t.Error("a missing file was accepted")
	}
}

// order is the test's Avro record, read without any Avro library: the
// binary encoding of its types is zig-zag varints (encoding/binary's
// Varint) and length-prefixed bytes (Avro 1.11 specification, "Binary
// Encoding"), so this is an independent reader of what the model wrote.
type order struct {
	name    string
	qty     int64
	note    string
	hasNote bool
}

func decodeOrder(t *testing.T, b []byte) order {
	t.Helper()
	varint := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			t.Fatalf("bad varint in %x", b)
		}
		b = b[n:]
		return v
	}
	str := func() string {
		n := varint()
		if n < 0 || int(n) > len(b) {
			t.Fatalf("bad string length %d", n)
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	var o order
	o.name = str()
	o.qty = varint()
	if branch := varint(); branch == 1 {
		o.note, o.hasNote = str(), true
	} else if branch != 0 {
		t.Fatalf("union branch %d", branch)
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left over", len(b))
	}
	return o
}

func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

// registry is an in-process Schema Registry on loopback that counts the
// requests it serves and can fail them.
type registry struct {
	*srfake.Registry
	requests atomic.Int64
	down     atomic.Bool
}

func newRegistry(t testing.TB, opts ...srfake.Option) *registry {
	t.Helper()
	r := &registry{Registry: srfake.New(opts...)}
	r.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		r.requests.Add(1)
		if r.down.Load() {
			http.Error(w, `{"error_code":50003,"message":"backend unavailable"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	t.Cleanup(r.Close)
	return r
}

// clock is a test clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newCatalog(t testing.TB, reg *registry, o RegistryOptions) (*Registry, *clock) {
	t.Helper()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	o.URLs = []string{reg.URL()}
	o.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	o.Now = clk.Now
	if o.MaxAge == 0 {
		o.MaxAge = time.Minute
	}
	cat, err := NewRegistry("registry0", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	return cat, clk
}

func TestRegistryAvroWireFormat(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, srfake.WithAuth("Basic "+basic("svc", "s3cret")))
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	cat, _ := newCatalog(t, reg, RegistryOptions{Username: "svc", Password: "s3cret"})
	m := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: TopicSubject("orders", false)}})

	rec, err := m.Encode(ctx, nil, []byte(`{"name":"pen","qty":3}`))
	if err != nil {
		t.Fatal(err)
	}
	// The registry's wire format: magic byte 0, the id big-endian, Avro.
	if rec[0] != 0 || binary.BigEndian.Uint32(rec[1:5]) != 7 {
		t.Fatalf("header % x, want 00 00 00 00 07", rec[:5])
	}
	if got := decodeOrder(t, rec[5:]); got != (order{name: "pen", qty: 3}) {
		t.Fatalf("decoded %+v", got)
	}
	js, err := m.Decode(ctx, nil, rec)
	if err != nil || !jsonEqual(t, js, `{"name":"pen","qty":3,"note":null}`) {
		t.Fatalf("to JSON: %s, %v", js, err)
	}
	// Validate-only on the same topic checks framed values.
	v := newModel(t, Config{Model: "avro", Catalog: cat, Ref: Ref{Subject: "orders-value"}})
	if _, err := v.Decode(ctx, nil, rec); err != nil {
		t.Fatalf("validate-only framed: %v", err)
	}
	if _, err := v.Decode(ctx, nil, rec[5:]); KindOf(err) != KindParse {
		t.Fatalf("unframed value: %v, want a parse error", err)
	}
	// An id the registry does not have is the value's fault: 400, asked once.
	forged := append([]byte{0, 0, 0, 0, 99}, rec[5:]...)
	for range 3 {
		if _, err := m.Decode(ctx, nil, forged); KindOf(err) != KindParse {
			t.Fatalf("unknown id: %v, want a parse error", err)
		}
	}
	st := cat.Status()
	if !st.Healthy || len(st.Missing) != 1 || st.Missing[0] != "id 99" {
		t.Errorf("status %+v: want healthy with id 99 missing", st)
	}

	// Wrong credentials: the registry's refusal makes the schema unavailable.
	bad, _ := newCatalog(t, reg, RegistryOptions{Token: "nope"})
	mb := newModel(t, Config{Model: "avro", View: "json", Catalog: bad, Ref: Ref{Subject: "orders-value"}})
	_, err = mb.Encode(ctx, nil, []byte(`{"name":"pen","qty":3}`))
	if e := wantKind(t, err, KindUnavailable); !strings.Contains(e.Error(), "not authorized") {
		t.Errorf("error %v: want the registry's reason", e)
	}
	if bad.Status().Healthy {
		t.Error("a refusing registry reported healthy")
	}
}

func TestRegistryProtobufWireFormat(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, srfake.WithAuth("Bearer tok"))
	reg.SeedSchema("events-value", 1, 12, sr.Schema{Schema: eventProto, Type: sr.TypeProtobuf})
	cat, _ := newCatalog(t, reg, RegistryOptions{Token: "tok"})
	m := newModel(t, Config{Model: "protobuf", View: "json", Catalog: cat, Ref: Ref{Subject: "events-value"}, Record: "example.Event"})

	rec, err := m.Encode(ctx, nil, []byte(`{"id":"e1","text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if rec[0] != 0 || binary.BigEndian.Uint32(rec[1:5]) != 12 {
		t.Fatalf("header % x", rec[:5])
	}
	// Message indexes: count 1, index 1 (Event is the file's second
	// message), zig-zag varints.
	n, k := binary.Varint(rec[5:])
	i, k2 := binary.Varint(rec[5+k:])
	if n != 1 || i != 1 {
		t.Fatalf("message indexes % x, want count 1 index 1", rec[5:5+k+k2])
	}
	var ev example.Event
	if err := proto.Unmarshal(rec[5+k+k2:], &ev); err != nil || ev.GetId() != "e1" || ev.GetText() != "hi" {
		t.Fatalf("generated type read %v, %v", &ev, err)
	}
	js, err := m.Decode(ctx, nil, rec)
	if err != nil || !jsonEqual(t, js, `{"id":"e1","text":"hi"}`) {
		t.Fatalf("to JSON: %s, %v", js, err)
	}

	// A value of the nested message, framed by another producer with
	// indexes [0, 0], reads as that message.
	inner := []byte{0, 0, 0, 0, 12, 4, 0, 0, 0x08, 0x05} // count 2 (zig-zag 4), 0, 0; n = 5
	if js, err := m.Decode(ctx, nil, inner); err != nil || !jsonEqual(t, js, `{"n":5}`) {
		t.Fatalf("nested message: %s, %v", js, err)
	}
	if _, err := m.Decode(ctx, nil, []byte{0, 0, 0, 0, 12, 2, 6, 0x08, 0x05}); KindOf(err) != KindParse {
		t.Fatalf("index naming no message: %v, want a parse error", err)
	}
}

func TestRegistryJSONSchema(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	reg.SeedSchema("orders-value", 1, 3, sr.Schema{Schema: orderJSONSchema, Type: sr.TypeJSON})
	cat, _ := newCatalog(t, reg, RegistryOptions{})
	// Validate-only, unframed: JSON written as received.
	m := newModel(t, Config{Model: "json", Catalog: cat, Ref: Ref{Subject: "orders-value"}, Frame: new(false)})
	if _, err := m.Encode(ctx, nil, []byte(`{"name":"a","qty":1}`)); err != nil {
		t.Fatal(err)
	}
	_, err := m.Encode(ctx, nil, []byte(`{"name":"a","qty":0}`))
	if e := wantKind(t, err, KindInvalid); e.Violations[0].Pointer != "#/qty" || e.Violations[0].Keyword != "#/properties/qty/minimum" {
		t.Errorf("violation %+v", e.Violations[0])
	}
	// Converted: framed JSON, as Confluent's JSON Schema serializer writes.
	c := newModel(t, Config{Model: "json", View: "json", Catalog: cat, Ref: Ref{Subject: "orders-value"}})
	rec, err := c.Encode(ctx, nil, []byte(`{"name":"a","qty":1}`))
	if err != nil || rec[0] != 0 || binary.BigEndian.Uint32(rec[1:5]) != 3 || string(rec[5:]) != `{"name":"a","qty":1}` {
		t.Fatalf("%q, %v", rec, err)
	}
	// The wrong schema type in the registry is refused, not misread.
	reg.SeedSchema("avro-value", 1, 4, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	w := newModel(t, Config{Model: "json", Catalog: cat, Ref: Ref{Subject: "avro-value"}})
	var se *SchemaError
	if err := w.Warm(ctx); !errors.As(err, &se) {
		t.Fatalf("warm a json model on an avro subject: %v, want a *SchemaError", err)
	}
}

func TestRegistrySteadyStateAndOutage(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	reg.SeedSchema("orders-value", 1, 1, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	cat, clk := newCatalog(t, reg, RegistryOptions{MaxAge: time.Minute, RetryAfter: 5 * time.Second})
	m := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "orders-value"}})
	body := []byte(`{"name":"pen","qty":3}`)

	if err := m.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	warm := reg.requests.Load()
	if warm != 1 {
		t.Fatalf("warming made %d requests, want 1", warm)
	}
	rec, err := m.Encode(ctx, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	// Steady state: encodes and decodes within max-age ask nothing.
	for range 100 {
		if _, err := m.Encode(ctx, nil, body); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Decode(ctx, nil, rec); err != nil {
			t.Fatal(err)
		}
	}
	if got := reg.requests.Load() - warm; got != 0 {
		t.Fatalf("steady state made %d registry requests, want 0", got)
	}
	if st := cat.Status(); st.Requests != uint64(warm) || !st.Healthy {
		t.Fatalf("status %+v: want %d requests counted, healthy", st, warm)
	}

	// Past max-age, `latest` is served from the cache while it is asked
	// again in the background; the new version is taken after that.
	ref := Ref{Subject: "orders-value"}
	reg.SeedSchema("orders-value", 2, 2, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	clk.Add(time.Minute)
	if rec1, err := m.Encode(ctx, nil, body); err != nil || binary.BigEndian.Uint32(rec1[1:5]) != 1 {
		t.Fatalf("at max-age: % x, %v; want the cached schema id 1", rec1, err)
	}
	<-cat.refreshed(ref)
	rec2, err := m.Encode(ctx, nil, body)
	if err != nil || binary.BigEndian.Uint32(rec2[1:5]) != 2 {
		t.Fatalf("after the refresh: % x, %v; want schema id 2", rec2, err)
	}
	if got := reg.requests.Load(); got != warm+1 {
		t.Fatalf("refresh made %d requests, want 1", got-warm)
	}

	// Outage with a warm cache: everything cached is still answered, also
	// past max-age (stale), and the status says the registry is down.
	reg.down.Store(true)
	clk.Add(2 * time.Minute)
	before := reg.requests.Load()
	for i := range 10 {
		if _, err := m.Encode(ctx, nil, body); err != nil {
			t.Fatalf("encode during outage: %v", err)
		}
		if _, err := m.Decode(ctx, nil, rec); err != nil {
			t.Fatalf("decode of a cached id during outage: %v", err)
		}
		if i == 0 {
			<-cat.refreshed(ref) // the failed refresh is remembered
		}
	}
	if got := reg.requests.Load() - before; got != 1 {
		t.Fatalf("outage: %d requests, want 1 (then none until retry-after)", got)
	}
	st := cat.Status()
	if st.Healthy || !strings.Contains(st.LastError, "backend unavailable") || st.Failures != 1 {
		t.Fatalf("status during outage %+v", st)
	}

	// Cold cache during the outage: unavailable, with the registry's reason.
	cold := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "other-value"}})
	_, err = cold.Encode(ctx, nil, body)
	e := wantKind(t, err, KindUnavailable)
	if !strings.Contains(e.Error(), "backend unavailable") || e.Problem().Status != 503 || strings.Contains(e.Problem().Detail, "backend") {
		t.Fatalf("cold error %q, problem %+v: want the reason in the error, not in the problem", e, e.Problem())
	}
	_, err = m.Decode(ctx, nil, append([]byte{0, 0, 0, 0, 42}, rec[5:]...))
	wantKind(t, err, KindUnavailable)

	// Recovery: the next attempt after retry-after succeeds.
	reg.down.Store(false)
	clk.Add(5 * time.Second)
	if _, err := cold.Encode(ctx, nil, body); KindOf(err) != KindUnavailable {
		t.Fatalf("a subject the registry lacks: %v, want unavailable", err)
	}
	if _, err := m.Encode(ctx, nil, body); err != nil {
		t.Fatal(err)
	}
	<-cat.refreshed(ref)
	if st := cat.Status(); !st.Healthy || len(st.Missing) != 1 {
		t.Fatalf("status after recovery %+v: want healthy, other-value missing", st)
	}
}

func TestRegistryUnreachable(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	reg.SeedSchema("orders-value", 1, 1, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	cat, _ := newCatalog(t, reg, RegistryOptions{})
	m := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "orders-value"}})
	if err := m.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	reg.Close() // nothing listens any more
	if _, err := m.Encode(ctx, nil, []byte(`{"name":"a","qty":1}`)); err != nil {
		t.Fatalf("cached schema with the registry gone: %v", err)
	}
	_, err := m.Decode(ctx, nil, []byte{0, 0, 0, 0, 5, 2, 'a', 2, 0})
	if e := wantKind(t, err, KindUnavailable); !strings.Contains(e.Error(), "connect") {
		t.Fatalf("cold id with the registry gone: %v, want the connection error", e)
	}
}

func TestRegistryConcurrentColdLookups(t *testing.T) {
	reg := newRegistry(t)
	reg.SeedSchema("orders-value", 1, 1, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	// Hold the registry's answer until all callers are looking the schema
	// up; any caller that joins after the answer finds it cached, so more
	// than one request means lookups were not shared.
	release := make(chan struct{})
	reg.Intercept(func(http.ResponseWriter, *http.Request) bool { <-release; return false })
	cat, _ := newCatalog(t, reg, RegistryOptions{Timeout: time.Minute})
	gate := &gatedCatalog{Catalog: cat, n: 50, all: release}
	m := newModel(t, Config{Model: "avro", View: "json", Catalog: gate, Ref: Ref{Subject: "orders-value"}})
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			_, err := m.Encode(context.Background(), nil, []byte(`{"name":"a","qty":1}`))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := reg.requests.Load(); got != 1 {
		t.Fatalf("50 concurrent cold lookups made %d requests, want 1", got)
	}
}

// gatedCatalog closes all once n lookups have started.
type gatedCatalog struct {
	Catalog
	n       int32
	started atomic.Int32
	all     chan struct{}
}

func (g *gatedCatalog) Lookup(ctx context.Context, ref Ref) (Schema, error) {
	if g.started.Add(1) == g.n {
		close(g.all)
	}
	return g.Catalog.Lookup(ctx, ref)
}

func TestAvroUnknownKeysNested(t *testing.T) {
	schema := `{"type":"record","name":"Cart","fields":[
	  {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[{"name":"sku","type":"string"}]}}},
	  {"name":"gift","type":["null","Line"],"default":null},
	  {"name":"attrs","type":{"type":"map","values":"string"}}]}`
	m := newModel(t, Config{Model: "avro", View: "json", Catalog: inline(t, map[string]string{"cart": schema}), Ref: Ref{Subject: "cart"}})
	ctx := context.Background()
	if _, err := m.Encode(ctx, nil, []byte(`{"lines":[{"sku":"a"}],"gift":{"sku":"b"},"attrs":{"any":"key"}}`)); err != nil {
		t.Fatalf("valid cart: %v", err)
	}
	_, err := m.Encode(ctx, nil, []byte(`{"lines":[{"sku":"a"},{"sku":"b","qty":2}],"gift":{"Line":{"sku":"c","x":1}},"attrs":{}}`))
	e := wantKind(t, err, KindInvalid)
	if got := strings.Join(pointers(e), " "); got != "#/gift/Line/x #/lines/1/qty" {
		t.Fatalf("violations at %q", got)
	}
}

func TestRegistryIDsCachedForGood(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	reg.SeedSchema("orders-value", 1, 9, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	cat, clk := newCatalog(t, reg, RegistryOptions{MaxAge: time.Minute})
	for range 3 {
		s, err := cat.ByID(ctx, 9)
		if err != nil || s.ID != 9 || s.Type != TypeAvro || s.Text != orderAvro {
			t.Fatalf("ByID: %+v, %v", s, err)
		}
		clk.Add(time.Hour) // ids never expire
	}
	if got := reg.requests.Load(); got != 1 {
		t.Fatalf("%d requests for one id, want 1", got)
	}
	// A fixed version does not expire either.
	for range 2 {
		if _, err := cat.Lookup(ctx, Ref{Subject: "orders-value", Version: 1}); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Hour)
	}
	if got := reg.requests.Load(); got != 2 {
		t.Fatalf("%d requests, want 2", got)
	}
}

func TestRegistryReferences(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	reg.SeedSchema("address-value", 1, 20, sr.Schema{Type: sr.TypeAvro,
		Schema: `{"type":"record","name":"Address","namespace":"shop","fields":[{"name":"city","type":"string"}]}`})
	reg.SeedSchema("customer-value", 1, 21, sr.Schema{Type: sr.TypeAvro,
		Schema:     `{"type":"record","name":"Customer","namespace":"shop","fields":[{"name":"name","type":"string"},{"name":"home","type":"shop.Address"}]}`,
		References: []sr.SchemaReference{{Name: "shop.Address", Subject: "address-value", Version: 1}}})
	reg.SeedSchema("money-value", 1, 30, sr.Schema{Type: sr.TypeProtobuf,
		Schema: "syntax = \"proto3\";\npackage shop;\nmessage Money { int64 cents = 1; }\n"})
	reg.SeedSchema("price-value", 1, 31, sr.Schema{Type: sr.TypeProtobuf,
		Schema:     "syntax = \"proto3\";\npackage shop;\nimport \"shop/money.proto\";\nmessage Price { Money amount = 1; }\n",
		References: []sr.SchemaReference{{Name: "shop/money.proto", Subject: "money-value", Version: 1}}})
	cat, _ := newCatalog(t, reg, RegistryOptions{})

	avroM := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "customer-value"}})
	rec, err := avroM.Encode(ctx, nil, []byte(`{"name":"Ann","home":{"city":"Oslo"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// Two length-prefixed strings after the header: "Ann", "Oslo".
	if want := "\x00\x00\x00\x00\x15\x06Ann\x08Oslo"; string(rec) != want {
		t.Fatalf("record %q, want %q", rec, want)
	}
	if _, err := avroM.Encode(ctx, nil, []byte(`{"name":"Ann","home":{"town":"Oslo"}}`)); KindOf(err) != KindInvalid {
		t.Fatalf("a referenced record's rules: %v, want invalid", err)
	}

	protoM := newModel(t, Config{Model: "protobuf", View: "json", Catalog: cat, Ref: Ref{Subject: "price-value"}})
	rec, err = protoM.Encode(ctx, nil, []byte(`{"amount":{"cents":"250"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// Header, index [0] as one 0 byte, then field 1 (message) holding field 1 varint 250.
	if want := "\x00\x00\x00\x00\x1f\x00\x0a\x03\x08\xfa\x01"; string(rec) != want {
		t.Fatalf("record %q, want %q", rec, want)
	}
	if js, err := protoM.Decode(ctx, nil, rec); err != nil || !jsonEqual(t, js, `{"amount":{"cents":"250"}}`) {
		t.Fatalf("to JSON: %s, %v", js, err)
	}
}

func TestRegistryTLS(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	reg.SeedSchema("orders-value", 1, 1, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	srv := httptest.NewTLSServer(reg.Handler())
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	for _, c := range []struct {
		name string
		tls  *tls.Config
		ok   bool
	}{
		{"trusted CA", &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, true},
		{"system roots", nil, false},
	} {
		cat, err := NewRegistry("registry0", RegistryOptions{URLs: []string{srv.URL}, TLS: c.tls, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(t, Config{Model: "avro", View: "json", Catalog: cat, Ref: Ref{Subject: "orders-value"}})
		_, err = m.Encode(ctx, nil, []byte(`{"name":"a","qty":1}`))
		cat.Close()
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && (KindOf(err) != KindUnavailable || !strings.Contains(err.Error(), "certificate")) {
			t.Errorf("%s: %v, want unavailable for the certificate", c.name, err)
		}
	}
}

func TestRegistryContext(t *testing.T) {
	// The fake resolves subjects without regard to contexts, so what is
	// checked is the request the catalog sends.
	reg := newRegistry(t)
	reg.SeedSchema("orders-value", 1, 5, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	var mu sync.Mutex
	var paths []string
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		return false
	})
	staging, _ := newCatalog(t, reg, RegistryOptions{Context: ".staging"})
	if s, err := staging.Lookup(context.Background(), Ref{Subject: "orders-value"}); err != nil || s.ID != 5 {
		t.Fatalf("lookup: %+v, %v", s, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/contexts/.staging/subjects/orders-value/versions/latest" {
		t.Fatalf("requests %q, want the subject in context .staging", paths)
	}
}
