package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Load reads the configuration file at path. `${env:NAME}` resolves from the
// process environment and relative paths (keys-file, `${file:...}`) against
// the file's directory. Mistakes in the file are returned as Errors; failing
// to read the file at all is a plain error.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data, os.LookupEnv)
}

// Parse parses configuration data read from file (used in positions and to
// resolve relative paths). env looks up `${env:NAME}`; nil means no variable
// is set. The error, if any, is Errors: every mistake found, in file order,
// each at the node it concerns. A binding or guard whose type is missing or
// unknown is not checked further, as its fields cannot be known.
//
// # References
//
// A string value may hold `${...}` references. `${env:NAME}` (an environment
// variable) and `${file:PATH}` (a regular file of at most 1 MiB, without its
// final newline; a relative PATH resolves against the config file's
// directory) may appear in any string value and are resolved while loading;
// their values are inserted literally, never parsed again. A `$` not followed
// by `{` is literal. Binding and guard `type`, binding `kind` and
// `with.capability` are read literally: they select the shape of the rest.
//
// The other references are resolved per request, so each is allowed only
// where the request provides it:
//
//	field                                    params  idempotencyKey  correlationId  guarded['g'].identity
//	http-kafka topic, filters (key, headers)   yes        -               -                yes
//	http-kafka produce key, overrides          yes       yes              -                yes
//	http-kafka async values (location, ...)    yes        -              yes                -
//	grpc-kafka topic, filters                   -         -               -                yes
//	grpc-kafka produce key, overrides           -        yes              -                yes
//	everything else (reply-to, paths, options)  -         -               -                 -
//
// `${params.x}` must be defined by every `when` path of its route;
// `${guarded['g'].identity}` needs g listed in the route's `guarded`.
// `${correlationId}` stays out of keys, topics and overrides because the
// correlation id is computed over them; identities stay out of async values
// so they never appear in a URL. A topic holding a per-request reference needs
// `topic-pattern`.
func Parse(file string, data []byte, env func(string) (string, bool)) (*Config, error) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	d := &decoder{file: file, dir: filepath.Dir(file), env: env, lineLens: lineLengths(data), shape: newShape()}
	cfg := d.decodeFile(data)
	if errs := d.result(); errs != nil {
		return nil, errs
	}
	cfg.Files = slices.Sorted(maps.Keys(d.files))
	return cfg, nil
}

// decoder walks the YAML AST of one file, building the model and collecting
// every mistake with its position.
type decoder struct {
	file    string
	dir     string
	env     func(string) (string, bool)
	errs    Errors
	anchors map[string][]ast.Node // by name, in document order

	lineLens []int  // bytes per line, to keep positions inside the input
	shape    *shape // the fields each object allows

	guardNames map[string]bool   // every name under guards, valid or not
	proxyTypes map[string]string // proxy binding name → type, for exit messages
	kafkaNames map[string]bool   // every kafka binding name, valid or not
	files      map[string]bool   // absolute paths of the files read besides the configuration
}

func (d *decoder) result() Errors {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *Error) int {
		if a.Pos.Line != b.Pos.Line {
			return a.Pos.Line - b.Pos.Line
		}
		return a.Pos.Col - b.Pos.Col
	})
	// An anchored node used through several aliases reports its mistakes once.
	return slices.CompactFunc(d.errs, func(a, b *Error) bool { return *a == *b })
}

func (d *decoder) errorf(n ast.Node, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: d.pos(n), Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) pos(n ast.Node) Pos {
	tk := startToken(n)
	if tk == nil || tk.Position == nil {
		return d.at(1, 1)
	}
	return d.at(tk.Position.Line, tk.Position.Column)
}

// at makes a position, kept inside the input: the parser places an implicit
// null (`key:` at the end of a line) one column past the line's end.
func (d *decoder) at(line, col int) Pos {
	line = max(1, min(line, len(d.lineLens)))
	col = max(1, min(col, d.lineLens[line-1]+1))
	return Pos{File: d.file, Line: line, Col: col}
}

func lineLengths(data []byte) []int {
	lens := []int{}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return append(lens, len(data))
		}
		lens = append(lens, i)
		data = data[i+1:]
	}
}

// startToken is the token where a node starts as the user sees it: a block
// mapping's own token is its first ':', so use its first key instead.
func startToken(n ast.Node) *token.Token {
	switch v := n.(type) {
	case nil:
		return nil
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 {
			return startToken(v.Values[0])
		}
		return v.Start
	case *ast.MappingValueNode:
		if v.Key != nil {
			return startToken(v.Key)
		}
		return v.Start
	case *ast.MappingKeyNode:
		return v.Start
	case *ast.DocumentNode:
		return startToken(v.Body)
	}
	return n.GetToken()
}

// parseYAML parses data, turning a panic of the third-party parser into an
// error: a broken file must never take the processor down on reload.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("the YAML parser failed on this input: %v", r)
		}
	}()
	// Duplicate keys are reported by the decoder, all of them, with both positions.
	return parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
}

func (d *decoder) decodeFile(data []byte) *Config {
	f, err := parseYAML(data)
	if err != nil {
		pos := d.at(1, 1)
		msg := err.Error()
		var yerr yaml.Error
		if errors.As(err, &yerr) {
			msg = yerr.GetMessage()
			if tk := yerr.GetToken(); tk != nil && tk.Position != nil {
				pos = d.at(tk.Position.Line, tk.Position.Column)
			}
		}
		d.errs = append(d.errs, &Error{Pos: pos, Msg: "invalid YAML: " + msg})
		return nil
	}
	var body ast.Node
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue // comments only, or a trailing "---"
		}
		if body != nil {
			d.errorf(doc.Body, "a configuration file holds one YAML document: remove this second one")
			break
		}
		body = doc.Body
	}
	if body == nil {
		d.errs = append(d.errs, &Error{Pos: d.at(1, 1), Msg: "the file is empty: a configuration needs bindings"})
		return nil
	}
	d.anchors = map[string][]ast.Node{}
	d.collectAnchors(body)
	return d.top(body)
}

// collectAnchors indexes anchors so aliases can find the last anchor of their
// name defined before them, as YAML requires.
func (d *decoder) collectAnchors(n ast.Node) {
	switch v := n.(type) {
	case *ast.AnchorNode:
		if v.Name != nil {
			name := v.Name.GetToken().Value
			d.anchors[name] = append(d.anchors[name], v)
		}
		d.collectAnchors(v.Value)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			d.collectAnchors(mv)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(v.Key)
		d.collectAnchors(v.Value)
	case *ast.MappingKeyNode:
		d.collectAnchors(v.Value)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			d.collectAnchors(e)
		}
	case *ast.TagNode:
		d.collectAnchors(v.Value)
	}
}

func before(a, b *token.Token) bool {
	if a == nil || b == nil || a.Position == nil || b.Position == nil {
		return false
	}
	if a.Position.Line != b.Position.Line {
		return a.Position.Line < b.Position.Line
	}
	return a.Position.Column < b.Position.Column
}

// maxAliasHops bounds alias chains, which may loop (`a: &x *x`).
const maxAliasHops = 32

// value strips anchors and standard tags and follows aliases. It returns nil
// (the mistake reported) for a broken alias or an unsupported tag; a missing
// value (`key:`) is a *ast.NullNode, not nil.
func (d *decoder) value(n ast.Node) ast.Node {
	for hops := 0; ; hops++ {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			if hops > maxAliasHops {
				d.errorf(v, "alias chain too long or circular")
				return nil
			}
			name := ""
			if v.Value != nil {
				name = v.Value.GetToken().Value
			}
			var target ast.Node
			for _, a := range d.anchors[name] {
				if before(a.GetToken(), v.GetToken()) {
					target = a
				}
			}
			if target == nil {
				d.errorf(v, "alias *%s refers to no anchor &%s defined before it", name, name)
				return nil
			}
			n = target
		case *ast.TagNode:
			tag := v.Start.Value
			switch tag {
			case "!!str":
				return d.strTag(v)
			case "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq":
				n = v.Value
			default:
				d.errorf(v, "unsupported YAML tag %s: write the value without it", tag)
				return nil
			}
		case nil:
			return &ast.NullNode{BaseNode: &ast.BaseNode{}}
		default:
			return n
		}
	}
}

// strTag turns `!!str 123` into the string "123".
func (d *decoder) strTag(v *ast.TagNode) ast.Node {
	inner := d.value(v.Value)
	switch s := inner.(type) {
	case nil:
		return nil
	case *ast.StringNode, *ast.LiteralNode:
		return s
	case *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode:
		d.errorf(v, "!!str needs a scalar value")
		return nil
	}
	tk := inner.GetToken()
	if tk == nil {
		return &ast.StringNode{BaseNode: &ast.BaseNode{}, Token: v.Start, Value: ""}
	}
	return &ast.StringNode{BaseNode: &ast.BaseNode{}, Token: tk, Value: tk.Value}
}

// readFile reads a secret for `${file:...}` or keys-file; relative paths
// resolve against the config file's directory. One final newline is dropped:
// files written by editors and secret mounts usually end with one.
func (d *decoder) readFile(name string) (string, error) {
	b, err := d.readBytes(name)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.TrimSuffix(s, "\r"), nil
}

// maxSecretFile bounds files read for `${file:...}` and keys-file: they hold
// secrets and key sets, never megabytes.
const maxSecretFile = 1 << 20

func (d *decoder) readBytes(name string) ([]byte, error) {
	p := name
	if !filepath.IsAbs(p) {
		p = filepath.Join(d.dir, p)
	}
	if abs, err := filepath.Abs(p); err == nil {
		// Recorded even when unreadable: the file appearing is a change too.
		if d.files == nil {
			d.files = map[string]bool{}
		}
		d.files[abs] = true
	}
	b, err := readRegular(p)
	if err != nil {
		// The OS error names the joined path; the user wrote name.
		var perr *fs.PathError
		if errors.As(err, &perr) {
			err = perr.Err
		}
		return nil, fmt.Errorf("cannot read %s: %v", name, err)
	}
	return b, nil
}

// readRegular reads a regular file of at most maxSecretFile bytes; devices
// and pipes are refused so a load can never block or run out of memory.
func readRegular(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("larger than %s", FormatSize(maxSecretFile))
	}
	return b, nil
}
