package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// optionString reads an optional non-empty string option into dst; false if
// it is there and not one.
func (d *decoder) optionString(m map[string]*entry, key string, dst *string) bool {
	x := m[key]
	if x == nil {
		return true
	}
	s, good := d.nonEmpty(x.v, key)
	*dst = s
	return good
}

// size reads a byte size: a positive integer or a string such as 1MiB.
func (d *decoder) size(n ast.Node, field string) (int64, bool) {
	var v int64
	switch n.(type) {
	case *ast.IntegerNode:
		x, ok := d.integer(n, field)
		if !ok {
			return 0, false
		}
		v = x
	case *ast.StringNode, *ast.LiteralNode:
		s, ok := d.str(n, field)
		if !ok {
			return 0, false
		}
		x, err := ParseSize(s)
		if err != nil {
			d.errorf(n, "%s: %v", field, err)
			return 0, false
		}
		v = x
	case nil:
		return 0, false
	default:
		d.wrongType(n, field, "a size (bytes, or a string such as 512KiB or 1MiB)")
		return 0, false
	}
	if v <= 0 {
		d.errorf(n, "%s must be positive, got %d", field, v)
		return 0, false
	}
	return v, true
}

// duration reads a duration string such as 30s; zero is allowed only where
// it means "none" (allowZero).
func (d *decoder) duration(n ast.Node, field string, allowZero bool) (time.Duration, bool) {
	var s string
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode:
		x, ok := d.str(n, field)
		if !ok {
			return 0, false
		}
		s = x
	case *ast.IntegerNode, *ast.FloatNode:
		s = n.GetToken().Value
	case nil:
		return 0, false
	default:
		d.wrongType(n, field, "a duration such as 30s")
		return 0, false
	}
	v, err := ParseDuration(s)
	if err != nil {
		d.errorf(n, "%s: %v", field, err)
		return 0, false
	}
	if v < 0 || (v == 0 && !allowZero) {
		d.errorf(n, "%s must be positive, got %s", field, s)
		return 0, false
	}
	return v, true
}

// describe names a node's kind for "must be X, got Y" messages.
func describe(n ast.Node) string {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode:
		return "an integer"
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.NullNode:
		return "nothing (null)"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a sequence"
	}
	return "an unsupported value"
}

func isScalar(n ast.Node) bool {
	switch n.(type) {
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode, *ast.BoolNode:
		return true
	}
	return false
}

// wrongType reports that field holds the wrong kind of value; want is e.g. "a string".
func (d *decoder) wrongType(n ast.Node, field, want string) {
	got := describe(n)
	if want == "a string" && isScalar(n) {
		d.errorf(n, "%s must be a string, got %s: quote it (%q)", field, got, n.GetToken().Value)
		return
	}
	d.errorf(n, "%s must be %s, got %s", field, want, got)
}

// entry is one key of a mapping; v is its resolved value (nil when broken).
type entry struct {
	key string
	kn  ast.Node
	v   ast.Node
}

// mapping returns the entries of a mapping node in file order, reporting a
// non-mapping, duplicate keys (keyNoun names them: "key", "binding name"),
// merge keys and non-scalar keys.
func (d *decoder) mapping(n ast.Node, field, keyNoun string) (ast.Node, []entry, bool) {
	n = d.value(n)
	if n == nil {
		return nil, nil, false
	}
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	default:
		d.wrongType(n, field, "a mapping")
		return nil, nil, false
	}
	first := map[string]ast.Node{}
	var out []entry
	for _, mv := range values {
		kn := ast.Node(mv.Key)
		if mk, ok := kn.(*ast.MappingKeyNode); ok {
			kn = mk.Value
		}
		if _, ok := kn.(*ast.MergeKeyNode); ok {
			d.errorf(kn, "merge keys (<<) are not supported: write the fields out")
			continue
		}
		key, ok := d.keyText(kn)
		if !ok {
			continue
		}
		if prev, dup := first[key]; dup {
			p := d.pos(prev)
			d.errorf(kn, "duplicate %s %q: first defined at line %d, column %d", keyNoun, key, p.Line, p.Col)
			continue
		}
		first[key] = kn
		out = append(out, entry{key: key, kn: kn, v: d.value(mv.Value)})
	}
	return n, out, true
}

func (d *decoder) keyText(kn ast.Node) (string, bool) {
	switch k := kn.(type) {
	case *ast.StringNode:
		return k.Value, true
	case *ast.AnchorNode, *ast.AliasNode, *ast.TagNode:
		v := d.value(k)
		if v == nil {
			return "", false
		}
		return d.keyText(v)
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return k.GetToken().Value, true
	}
	d.errorf(kn, "a mapping key must be a string, got %s", describe(kn))
	return "", false
}

// fields indexes entries by key, reporting keys not in allowed.
func (d *decoder) fields(entries []entry, where string, allowed ...string) map[string]*entry {
	m := make(map[string]*entry, len(entries))
	for i := range entries {
		e := &entries[i]
		if slices.Contains(allowed, e.key) {
			m[e.key] = e
			continue
		}
		hint := ""
		if s := closest(e.key, allowed); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		d.errorf(e.kn, "unknown field %q in %s%s; allowed: %s", e.key, where, hint, strings.Join(allowed, ", "))
	}
	return m
}

// closest returns the candidate within two edits of s (a typo), if any.
func closest(s string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// sequence returns the items of a sequence node, resolved (nil items are broken).
func (d *decoder) sequence(n ast.Node, field string) (ast.Node, []ast.Node, bool) {
	n = d.value(n)
	if n == nil {
		return nil, nil, false
	}
	s, ok := n.(*ast.SequenceNode)
	if !ok {
		d.wrongType(n, field, "a sequence")
		return nil, nil, false
	}
	items := make([]ast.Node, len(s.Values))
	for i, v := range s.Values {
		items[i] = d.value(v)
	}
	return n, items, true
}

// literal returns a string value as written, without resolving references.
func (d *decoder) literal(n ast.Node, field string) (string, bool) {
	switch s := n.(type) {
	case nil:
		return "", false
	case *ast.StringNode:
		return s.Value, true
	case *ast.LiteralNode:
		if s.Value == nil {
			return "", true
		}
		return s.Value.Value, true
	}
	d.wrongType(n, field, "a string")
	return "", false
}

// str returns a string value with `${env:...}` and `${file:...}` resolved;
// per-request references are refused.
func (d *decoder) str(n ast.Node, field string) (string, bool) {
	t, ok := d.template(n, field, 0)
	if !ok {
		return "", false
	}
	return t.Raw, true
}

// nonEmpty is str that also refuses "".
func (d *decoder) nonEmpty(n ast.Node, field string) (string, bool) {
	s, ok := d.str(n, field)
	if ok && s == "" {
		d.errorf(n, "%s must not be empty", field)
		return "", false
	}
	return s, ok
}

// template parses a templated string value: load-time references are
// resolved, per-request references are kept if allow permits them.
func (d *decoder) template(n ast.Node, field string, allow refSet) (Template, bool) {
	s, ok := d.literal(n, field)
	if !ok {
		return Template{}, false
	}
	raw, err := lexTemplate(s)
	if err != nil {
		d.errorf(n, "%s: %v", field, err)
		return Template{}, false
	}
	var t Template
	var lit, text strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.Parts = append(t.Parts, TemplatePart{Literal: lit.String()})
			lit.Reset()
		}
	}
	for _, p := range raw {
		if p.Ref == nil {
			lit.WriteString(p.Literal)
			text.WriteString(p.Literal)
			continue
		}
		switch p.Ref.Kind {
		case refEnv:
			v, found := d.env(p.Ref.Name)
			if !found {
				d.errorf(n, "environment variable %s is not set (referenced by %s in %s)", p.Ref.Name, p.Ref.Text, field)
				ok = false
			}
			lit.WriteString(v)
			text.WriteString(v)
		case refFile:
			v, err := d.readFile(p.Ref.Name)
			if err != nil {
				d.errorf(n, "%s in %s: %v", p.Ref.Text, field, err)
				ok = false
			}
			lit.WriteString(v)
			text.WriteString(v)
		default:
			if !allow.allows(p.Ref.Kind) {
				switch {
				case p.Ref.Kind == RefParam && allow&inGRPCRoute != 0:
					d.errorf(n, "%s cannot be used in a grpc-kafka route: gRPC calls have no path parameters", p.Ref.Text)
				case allow&^inGRPCRoute == 0:
					d.errorf(n, "%s cannot be used in %s: only ${env:NAME} and ${file:PATH} are resolved there", p.Ref.Text, field)
				default:
					d.errorf(n, "%s cannot be used in %s: it may reference %s", p.Ref.Text, field, allow.names())
				}
				ok = false
				continue
			}
			flush()
			t.Parts = append(t.Parts, TemplatePart{Ref: p.Ref.Kind, Name: p.Ref.Name})
			text.WriteString(p.Ref.Text)
		}
	}
	flush()
	t.Raw = text.String()
	return t, ok
}

// integer returns an integer value.
func (d *decoder) integer(n ast.Node, field string) (int64, bool) {
	in, ok := n.(*ast.IntegerNode)
	if !ok {
		d.wrongType(n, field, "an integer")
		return 0, false
	}
	switch v := in.Value.(type) {
	case int64:
		return v, true
	case uint64:
		if v <= 1<<63-1 {
			return int64(v), true
		}
	}
	d.errorf(n, "%s: %s is too large", field, in.Token.Value)
	return 0, false
}

// scalarText renders a scalar for a librdkafka property.
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.IntegerNode:
		switch x := v.Value.(type) {
		case int64:
			return strconv.FormatInt(x, 10), true
		case uint64:
			return strconv.FormatUint(x, 10), true
		}
	case *ast.FloatNode:
		return strconv.FormatFloat(v.Value, 'f', -1, 64), true
	case *ast.BoolNode:
		return strconv.FormatBool(v.Value), true
	}
	return "", false
}
