//go:build !nodev

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// devRegistry is dev's embedded Schema Registry: the Confluent REST API in
// memory (franz-go's srfake, the same one the tests run), so a
// configuration whose catalogs name a registry runs as it is, the way its
// kafka bindings run against the embedded broker. Schemas are registered as
// with any registry (POST /subjects/{subject}/versions) and forgotten when
// dev stops.
type devRegistry struct {
	srv  *http.Server
	url  string
	urls []registryURL // the catalogs pointed at it
}

// startRegistry starts the embedded registry when dev runs a configuration
// file with schema-registry catalogs on its embedded broker; nil otherwise
// (with --kafka existing the configuration's own registry is used).
func (f *devFlags) startRegistry() (*devRegistry, error) {
	if f.cfgPath == "" || f.processor != "" || f.existing() {
		return nil, nil
	}
	data, err := os.ReadFile(f.cfgPath)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	urls, err := registryCatalogs(data)
	if err != nil {
		return nil, err
	}
	if len(urls) == 0 {
		if len(f.schemas) > 0 {
			return nil, usageError{fmt.Sprintf("--schema: %s has no schema-registry catalog, so dev starts no registry", f.cfgPath)}
		}
		return nil, nil
	}
	l, err := net.Listen("tcp", f.registry)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded Schema Registry on %s (--registry chooses another address): %w", f.registry, err)
	}
	fake := srfake.NewRegistry()
	for _, s := range f.schemas {
		if _, _, err := fake.RegisterSchema(s.subject, s.schema); err != nil {
			l.Close() //nolint:errcheck // the registration's error is the one to report
			return nil, fmt.Errorf("--schema %s=%s: registering it: %w", s.subject, s.file, err)
		}
	}
	r := &devRegistry{
		srv:  &http.Server{Handler: fake.Handler(), ReadHeaderTimeout: 10 * time.Second},
		url:  "http://" + l.Addr().String(),
		urls: urls,
	}
	go func() { _ = r.srv.Serve(l) }() // Serve ends with Shutdown
	return r, nil
}

// schemaFlag collects dev's repeatable --schema SUBJECT=FILE flags: schemas
// the embedded registry holds before the processor starts, so the first
// request finds them (one registered later is found once the catalog asks
// again, after its retry-after).
type schemaFlag []devSchema

type devSchema struct {
	subject, file string
	schema        sr.Schema
}

const schemaUsage = "register a schema in the embedded Schema Registry before the processor starts, SUBJECT=FILE (.avsc Avro, .json JSON Schema, .proto Protobuf; repeatable)"

func (f *schemaFlag) String() string {
	var out []string
	for _, s := range *f {
		out = append(out, s.subject+"="+s.file)
	}
	return strings.Join(out, ",")
}

func (f *schemaFlag) Set(v string) error {
	subject, file, ok := strings.Cut(v, "=")
	if !ok || subject == "" || file == "" {
		return fmt.Errorf("%q: want SUBJECT=FILE", v)
	}
	var typ sr.SchemaType
	switch strings.ToLower(filepath.Ext(file)) {
	case ".avsc":
		typ = sr.TypeAvro
	case ".json":
		typ = sr.TypeJSON
	case ".proto":
		typ = sr.TypeProtobuf
	default:
		return fmt.Errorf("%q: the file's extension says its kind: .avsc (Avro), .json (JSON Schema) or .proto (Protobuf)", v)
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	*f = append(*f, devSchema{subject: subject, file: file, schema: sr.Schema{Schema: string(text), Type: typ}})
	return nil
}

// catalogs are the names of the catalogs pointed at the registry.
func (r *devRegistry) catalogs() []string {
	var out []string
	for _, u := range r.urls {
		out = append(out, u.catalog)
	}
	slices.Sort(out)
	return out
}

// Close stops the registry.
func (r *devRegistry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stopping the embedded Schema Registry: %w", err)
	}
	return nil
}

// registryCatalogs lists the schema-registry catalogs of a configuration's
// text and the position of each one's url value.
type registryURL struct {
	catalog   string
	line, col int // 1-based, of the url's scalar
}

func registryCatalogs(data []byte) ([]registryURL, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil || len(f.Docs) == 0 {
		return nil, err // the loader reports it with its position
	}
	var out []registryURL
	for name, c := range mapEntries(f.Docs[0].Body, "catalogs") {
		entries := mapEntriesOf(c)
		if scalarText(entries["type"]) != "schema-registry" {
			continue
		}
		url := mapEntriesOf(entries["options"])["url"]
		if url == nil || url.GetToken() == nil {
			continue // the loader says what is missing
		}
		if _, ok := url.(*ast.SequenceNode); ok {
			return nil, fmt.Errorf("catalog %s: dev points a registry catalog at its embedded registry, and takes one url, not a list", name)
		}
		p := url.GetToken().Position
		out = append(out, registryURL{catalog: name, line: p.Line, col: p.Column})
	}
	slices.SortFunc(out, func(a, b registryURL) int { return a.line - b.line })
	return out, nil
}

// pointRegistries rewrites each registry catalog's url in the text to url,
// on the same line, so positions in errors stay those of the user's file.
// It also returns the text it replaced.
func pointRegistries(data []byte, urls []registryURL, url string) ([]byte, []string) {
	lines := strings.SplitAfter(string(data), "\n")
	var replaced []string
	for _, u := range urls {
		line := lines[u.line-1]
		start := u.col - 1
		end := scalarEnd(line, start)
		replaced = append(replaced, line[start:end])
		lines[u.line-1] = line[:start] + strconv.Quote(url) + line[end:]
	}
	return []byte(strings.Join(lines, "")), replaced
}

// scalarEnd is where the scalar starting at start ends: its closing quote,
// or the end of a plain scalar (a flow separator, a comment or the line's
// end).
func scalarEnd(line string, start int) int {
	if q := line[start]; q == '"' || q == '\'' {
		if i := strings.IndexByte(line[start+1:], q); i >= 0 {
			return start + 1 + i + 1
		}
		return len(strings.TrimRight(line, "\r\n"))
	}
	end := len(strings.TrimRight(line, "\r\n"))
	for _, stop := range []string{", ", " }", "}", " #"} {
		if i := strings.Index(line[start:], stop); i >= 0 && start+i < end {
			end = start + i
		}
	}
	return len(strings.TrimRight(line[:end], " "))
}

// mapEntries is the map at key of the top-level map n.
func mapEntries(n ast.Node, key string) map[string]ast.Node {
	return mapEntriesOf(mapEntriesOf(n)[key])
}

// mapEntriesOf is a map node's values by key (nil for anything else).
func mapEntriesOf(n ast.Node) map[string]ast.Node {
	out := map[string]ast.Node{}
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	}
	for _, v := range values {
		out[scalarText(v.Key)] = v.Value
	}
	return out
}

func scalarText(n ast.Node) string {
	if s, ok := n.(ast.ScalarNode); ok && n != nil {
		return fmt.Sprint(s.GetValue())
	}
	return ""
}
