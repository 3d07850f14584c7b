package models

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
)

// SchemaType is the schema language of a schema text.
type SchemaType string

const (
	TypeJSON     SchemaType = "json"
	TypeAvro     SchemaType = "avro"
	TypeProtobuf SchemaType = "protobuf"
)

// Schema is a schema text as a catalog holds it.
type Schema struct {
	// ID identifies the schema in its catalog: the registry's id, or the
	// CRC32C of the text for inline and filesystem catalogs (as Zilla does).
	ID   int
	Type SchemaType // empty when the catalog does not say (inline, files)
	Text string
	// Deps are the schemas Text references (registry references, resolved),
	// dependencies first, each under the name Text uses for it (a .proto
	// import path, an Avro named type's file, a JSON Schema $ref URL).
	Deps []NamedSchema
}

// NamedSchema is a referenced schema under the name its referrer uses.
type NamedSchema struct {
	Name string
	Schema
}

// Ref names a schema in a catalog: by ID, or by Subject and Version
// (Version 0 means the latest).
type Ref struct {
	ID      int
	Subject string
	Version int
}

func (r Ref) String() string {
	if r.Subject == "" {
		return "id " + strconv.Itoa(r.ID)
	}
	if r.Version == 0 {
		return r.Subject + "@latest"
	}
	return r.Subject + "@" + strconv.Itoa(r.Version)
}

// TopicSubject is the subject of a topic's key or value under the registry's
// default TopicNameStrategy (Zilla's `strategy: topic`).
func TopicSubject(topic string, key bool) string {
	if key {
		return topic + "-key"
	}
	return topic + "-value"
}

// ErrNotFound is wrapped by catalog errors for a subject, version or id the
// catalog does not have.
var ErrNotFound = errors.New("schema not found")

// Catalog is where schemas come from.
type Catalog interface {
	// Name is the catalog's name in the configuration.
	Name() string
	// Lookup returns the schema ref names.
	Lookup(ctx context.Context, ref Ref) (Schema, error)
	// ByID returns the schema with this id, as named in a framed value.
	ByID(ctx context.Context, id int) (Schema, error)
	// Frames says whether values converted with this catalog's schemas carry
	// the registry wire format (magic byte 0, schema id; protobuf message
	// indexes) by default: true for registries, false for inline and files.
	Frames() bool
}

// Static is a catalog of schemas known at load: the `inline` and
// `filesystem` catalog types. Versions are not kept: every subject has one
// schema, version 1.
type Static struct {
	name     string
	subjects map[string]Schema
	ids      map[int]Schema
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// NewInline returns a catalog of the schema texts by subject.
func NewInline(name string, subjects map[string]string) (*Static, error) {
	c := &Static{name: name, subjects: make(map[string]Schema, len(subjects)), ids: make(map[int]Schema, len(subjects))}
	for subject, text := range subjects {
		s := Schema{ID: int(crc32.Checksum([]byte(text), castagnoli)), Text: text}
		if prev, ok := c.ids[s.ID]; ok && prev.Text != text {
			return nil, fmt.Errorf("catalog %s: subjects with schemas of equal CRC32C %d", name, s.ID)
		}
		c.subjects[subject] = s
		c.ids[s.ID] = s
	}
	return c, nil
}

// NewFilesystem returns a catalog of schema files by subject; relative paths
// are relative to dir (the configuration file's directory). The files are
// read now: a missing file is a load error, and requests never touch disk.
func NewFilesystem(name, dir string, paths map[string]string) (*Static, error) {
	texts := make(map[string]string, len(paths))
	for subject, path := range paths {
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("catalog %s, subject %s: %w", name, subject, err)
		}
		texts[subject] = string(b)
	}
	return NewInline(name, texts)
}

func (c *Static) Name() string { return c.name }
func (c *Static) Frames() bool { return false }

func (c *Static) Lookup(ctx context.Context, ref Ref) (Schema, error) {
	if ref.Subject == "" {
		return c.ByID(ctx, ref.ID)
	}
	s, ok := c.subjects[ref.Subject]
	if !ok || ref.Version > 1 {
		return Schema{}, fmt.Errorf("catalog %s: %s: %w", c.name, ref, ErrNotFound)
	}
	return s, nil
}

func (c *Static) ByID(_ context.Context, id int) (Schema, error) {
	s, ok := c.ids[id]
	if !ok {
		return Schema{}, fmt.Errorf("catalog %s: id %d: %w", c.name, id, ErrNotFound)
	}
	return s, nil
}
