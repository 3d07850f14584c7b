package models

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/sr"
)

// Config is one model: what a topic's keys or values (or a request body)
// must be, and whether they are converted.
type Config struct {
	// Model is json, avro, protobuf, or a primitive: string, int32, int64,
	// float, double, boolean, bytes.
	Model string
	// View "json" converts: JSON outside (requests, fetch answers), the
	// model's format inside Kafka. Empty validates only: bytes pass unchanged.
	View string
	// Catalog and Ref name the schema (json, avro, protobuf).
	Catalog Catalog
	Ref     Ref
	// Record is the protobuf message's full name; default the first message
	// of the file (Confluent's index [0]).
	Record string
	// Frame says whether values in Kafka carry the registry wire format
	// (magic byte 0, big-endian schema id; protobuf message indexes). Nil
	// means the catalog's default (registries frame, inline and files do
	// not).
	Frame *bool
	// String is the string model's constraints.
	String StringOptions
}

// codec is a compiled schema: the work for one schema id.
type codec interface {
	// validate checks a payload in the model's own format (unframed).
	validate(payload []byte, index []int) error
	// fromJSON appends the model's encoding of JSON src to dst.
	fromJSON(dst, src []byte) ([]byte, error)
	// toJSON appends the JSON of payload to dst.
	toJSON(dst, payload []byte, index []int) ([]byte, error)
	// index is the protobuf message index written in frames (nil otherwise).
	index() []int
}

// compiler builds a codec from a schema; errors are *SchemaError.
type compiler func(ctx context.Context, subject string, s Schema) (codec, error)

// Model validates and converts values. It is safe for concurrent use;
// compiled schemas are kept by id, so only a schema's first use compiles.
type Model struct {
	cfg     Config
	name    string // catalog/ref, for errors
	frame   bool
	compile compiler
	prim    *primitive // primitives have no schema

	mu    sync.RWMutex
	cache map[int]codec
}

// New checks a model configuration and, for schemas known at load (inline
// and filesystem catalogs), compiles the schema now: a schema that does not
// compile is a *SchemaError. Registry schemas compile on first use, or in
// Warm.
func New(ctx context.Context, cfg Config) (*Model, error) {
	m := &Model{cfg: cfg, cache: make(map[int]codec)}
	if cfg.View != "" && cfg.View != "json" {
		return nil, fmt.Errorf("model %s: unknown view %q (want json)", cfg.Model, cfg.View)
	}
	switch cfg.Model {
	case "json":
		m.compile = compileJSON
	case "avro":
		m.compile = compileAvro
	case "protobuf":
		m.compile = func(ctx context.Context, subject string, s Schema) (codec, error) {
			return compileProtobuf(ctx, subject, s, cfg.Record)
		}
	default:
		p, err := newPrimitive(cfg.Model, cfg.String)
		if err != nil {
			return nil, err
		}
		if cfg.View != "" {
			return nil, fmt.Errorf("model %s: no view: values are text", cfg.Model)
		}
		m.prim = p
		m.name = cfg.Model
		return m, nil
	}
	if cfg.Catalog == nil {
		return nil, fmt.Errorf("model %s: no catalog", cfg.Model)
	}
	if cfg.Ref.Subject == "" && cfg.Ref.ID == 0 {
		return nil, fmt.Errorf("model %s: catalog %s: no subject or id", cfg.Model, cfg.Catalog.Name())
	}
	m.name = cfg.Catalog.Name() + "/" + cfg.Ref.String()
	m.frame = cfg.Catalog.Frames()
	if cfg.Frame != nil {
		m.frame = *cfg.Frame
	}
	if _, ok := cfg.Catalog.(*Static); ok {
		if err := m.Warm(ctx); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Kind is the model's name: json, avro, protobuf or a primitive.
func (m *Model) Kind() string { return m.cfg.Model }

// StaticSchema returns the configured schema when its catalog holds it in
// memory (inline, filesystem): what a document generated without a
// registry can show.
func (m *Model) StaticSchema() (Schema, bool) {
	c, ok := m.cfg.Catalog.(*Static)
	if !ok {
		return Schema{}, false
	}
	s, err := c.Lookup(context.Background(), m.cfg.Ref)
	return s, err == nil
}

// Frames reports whether values in Kafka carry the registry wire format.
func (m *Model) Frames() bool { return m.frame }

// JSON reports whether clients send and read JSON for this model: a json
// model, or a view json.
func (m *Model) JSON() bool { return m.cfg.Model == "json" || m.cfg.View == "json" }

// Warm looks the configured schema up and compiles it: at load, so that a
// missing subject or a schema that does not compile is reported before
// traffic, and the first request finds it cached.
func (m *Model) Warm(ctx context.Context) error {
	if m.prim != nil {
		return nil
	}
	_, _, err := m.configured(ctx)
	var e *Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err // the cause: a *SchemaError or the catalog's error
	}
	return err
}

// Encode checks a value as it arrives from a client and appends what is
// written to Kafka to dst: src itself when validating only, else src (JSON)
// converted, framed if the model frames. Errors are *Error.
func (m *Model) Encode(ctx context.Context, dst, src []byte) ([]byte, error) {
	if m.prim != nil {
		if err := m.prim.validate(src); err != nil {
			return dst, err
		}
		return append(dst, src...), nil
	}
	if m.cfg.View == "" {
		return m.check(ctx, dst, src)
	}
	c, id, err := m.configured(ctx)
	if err != nil {
		return dst, err
	}
	n := len(dst)
	if m.frame {
		dst, _ = defaultHeader.AppendEncode(dst, id, c.index())
	}
	out, err := c.fromJSON(dst, src)
	if err != nil {
		return dst[:n], m.named(err, m.name)
	}
	return out, nil
}

// EncodeValue is Encode into a new slice, except that a value the model
// only checks (no view, or a primitive) is returned itself rather than
// copied: what a produce writes when its body is not converted.
func (m *Model) EncodeValue(ctx context.Context, src []byte) ([]byte, error) {
	if m.cfg.View != "" && m.prim == nil {
		return m.Encode(ctx, nil, src)
	}
	var err error
	if m.prim != nil {
		err = m.prim.validate(src)
	} else {
		err = m.validate(ctx, src)
	}
	if err != nil {
		return nil, err
	}
	return src, nil
}

// EncodeNative checks a value sent in the model's own format (a gRPC
// client's protobuf message) against the configured schema and appends
// what is written to Kafka to dst: the value, framed if the model frames.
// A view does not apply: the value is not JSON. Errors are *Error.
func (m *Model) EncodeNative(ctx context.Context, dst, src []byte) ([]byte, error) {
	if m.prim != nil {
		return m.Encode(ctx, dst, src)
	}
	c, id, err := m.configured(ctx)
	if err != nil {
		return dst, err
	}
	if err := c.validate(src, c.index()); err != nil {
		return dst, m.named(err, m.name)
	}
	if m.frame {
		dst, _ = defaultHeader.AppendEncode(dst, id, c.index())
	}
	return append(dst, src...), nil
}

// DecodeNative checks a value read from Kafka and appends it in the
// model's own format, unframed (what a gRPC client reads). Errors are
// *Error.
func (m *Model) DecodeNative(ctx context.Context, dst, src []byte) ([]byte, error) {
	if m.prim != nil {
		return m.Decode(ctx, dst, src)
	}
	c, payload, index, name, err := m.unframe(ctx, src)
	if err != nil {
		return dst, err
	}
	if err := c.validate(payload, index); err != nil {
		return dst, m.named(err, name)
	}
	return append(dst, payload...), nil
}

// Decode checks a value read from Kafka and appends what clients see to
// dst: the value itself when validating only, else its JSON. Errors are
// *Error.
func (m *Model) Decode(ctx context.Context, dst, src []byte) ([]byte, error) {
	if m.prim != nil {
		if err := m.prim.validate(src); err != nil {
			return dst, err
		}
		return append(dst, src...), nil
	}
	if m.cfg.View == "" {
		return m.check(ctx, dst, src)
	}
	c, payload, index, name, err := m.unframe(ctx, src)
	if err != nil {
		return dst, err
	}
	n := len(dst)
	out, err := c.toJSON(dst, payload, index)
	if err != nil {
		return dst[:n], m.named(err, name)
	}
	return out, nil
}

// check validates src in the model's own format and appends it unchanged.
func (m *Model) check(ctx context.Context, dst, src []byte) ([]byte, error) {
	if err := m.validate(ctx, src); err != nil {
		return dst, err
	}
	return append(dst, src...), nil
}

// validate checks src in the model's own format (framed if the model
// frames).
func (m *Model) validate(ctx context.Context, src []byte) error {
	c, payload, index, name, err := m.unframe(ctx, src)
	if err != nil {
		return err
	}
	if err := c.validate(payload, index); err != nil {
		return m.named(err, name)
	}
	return nil
}

var defaultHeader sr.ConfluentHeader

// maxIndexDepth bounds protobuf message indexes read from frames (nesting
// depth), so a forged count cannot allocate without bound.
const maxIndexDepth = 32

// unframe finds the codec for a value from Kafka (or a client's framed
// value): the id in the frame, else the configured schema.
func (m *Model) unframe(ctx context.Context, src []byte) (c codec, payload []byte, index []int, name string, err error) {
	if !m.frame {
		c, _, err = m.configured(ctx)
		return c, src, nil, m.name, err
	}
	id, rest, err := defaultHeader.DecodeID(src)
	if err != nil {
		return nil, nil, nil, m.name, parseError(m.name, "#", "not in the registry wire format (magic byte 0 and a 4-byte schema id)", err)
	}
	name = fmt.Sprintf("%s/id %d", m.cfg.Catalog.Name(), id)
	if m.cfg.Model == "protobuf" {
		index, rest, err = defaultHeader.DecodeIndex(rest, maxIndexDepth)
		if err != nil {
			return nil, nil, nil, name, parseError(name, "#", "bad protobuf message index in the registry wire format", err)
		}
	}
	c, err = m.byID(ctx, id, name)
	return c, rest, index, name, err
}

// configured returns the codec of the configured schema, and its id.
func (m *Model) configured(ctx context.Context) (codec, int, error) {
	s, err := m.cfg.Catalog.Lookup(ctx, m.cfg.Ref)
	if err != nil {
		// A configured schema that cannot be had is the service's problem,
		// not the client's, even when the registry says "not found".
		return nil, 0, &Error{Kind: KindUnavailable, Subject: m.name, Err: err}
	}
	c, err := m.codecFor(ctx, m.name, s)
	return c, s.ID, err
}

// byID returns the codec of a schema named by id in a value.
func (m *Model) byID(ctx context.Context, id int, name string) (codec, error) {
	m.mu.RLock()
	c, ok := m.cache[id]
	m.mu.RUnlock()
	if ok {
		return c, nil
	}
	s, err := m.cfg.Catalog.ByID(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, &Error{Kind: KindParse, Subject: name, Violations: []Violation{{Pointer: "#", Detail: "unknown schema id in the registry wire format"}}, Err: err}
	}
	if err != nil {
		return nil, &Error{Kind: KindUnavailable, Subject: name, Err: err}
	}
	return m.codecFor(ctx, name, s)
}

// codecFor returns the compiled schema s, compiling it on first use.
func (m *Model) codecFor(ctx context.Context, name string, s Schema) (codec, error) {
	m.mu.RLock()
	c, ok := m.cache[s.ID]
	m.mu.RUnlock()
	if ok {
		return c, nil
	}
	if s.Type != "" && string(s.Type) != m.cfg.Model {
		err := &SchemaError{Subject: name, Err: fmt.Errorf("the catalog has a %s schema, the model is %s", s.Type, m.cfg.Model)}
		return nil, &Error{Kind: KindUnavailable, Subject: name, Err: err}
	}
	c, err := m.compile(ctx, name, s)
	if err != nil {
		return nil, &Error{Kind: KindUnavailable, Subject: name, Err: err}
	}
	m.mu.Lock()
	m.cache[s.ID] = c
	m.mu.Unlock()
	return c, nil
}

// named sets the schema name on a codec's *Error.
func (m *Model) named(err error, name string) error {
	var e *Error
	if errors.As(err, &e) {
		e.Subject = name
		return e
	}
	return &Error{Kind: KindInvalid, Subject: name, Violations: []Violation{{Pointer: "#", Detail: err.Error()}}, Err: err}
}
