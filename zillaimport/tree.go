package zillaimport

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// node is a zilla.yaml value with its position: the importer reports every
// refusal at the line it concerns, so it keeps positions rather than decoding
// into structs.
type node struct {
	kind    nodeKind
	scalar  string // for scalars, the value as written (null is "")
	null    bool
	entries []entry // for maps, in file order
	items   []*node // for lists
	pos     config.Pos
}

type nodeKind int

const (
	scalarNode nodeKind = iota
	mapNode
	listNode
)

type entry struct {
	key string
	pos config.Pos
	val *node
}

// get returns the value of key in a map node, nil if absent.
func (n *node) get(key string) *node {
	if n == nil || n.kind != mapNode {
		return nil
	}
	for _, e := range n.entries {
		if e.key == key {
			return e.val
		}
	}
	return nil
}

// str returns a scalar's text, "" for anything else.
func (n *node) str() string {
	if n == nil || n.kind != scalarNode {
		return ""
	}
	return n.scalar
}

// strs returns a scalar or a list of scalars as strings.
func (n *node) strs() []string {
	switch {
	case n == nil:
		return nil
	case n.kind == scalarNode:
		return []string{n.scalar}
	case n.kind == listNode:
		var out []string
		for _, it := range n.items {
			out = append(out, it.str())
		}
		return out
	}
	return nil
}

// parse reads a zilla.yaml into nodes.
func parse(file string, src []byte) (*node, error) {
	f, err := parser.ParseBytes(src, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, fmt.Errorf("%s: want one YAML document", file)
	}
	return convert(file, f.Docs[0].Body)
}

func convert(file string, n ast.Node) (*node, error) {
	tk := n.GetToken()
	pos := config.Pos{File: file}
	if tk != nil {
		pos.Line, pos.Col = tk.Position.Line, tk.Position.Column
	}
	switch v := n.(type) {
	case *ast.TagNode:
		return convert(file, v.Value)
	case *ast.AnchorNode:
		return convert(file, v.Value)
	case *ast.AliasNode:
		return nil, &config.Error{Pos: pos, Msg: "YAML aliases are not supported by the importer: write the value out"}
	case *ast.MappingNode:
		out := &node{kind: mapNode, pos: pos}
		for _, mv := range v.Values {
			if err := addEntry(file, out, mv); err != nil {
				return nil, err
			}
		}
		return out, nil
	case *ast.MappingValueNode:
		out := &node{kind: mapNode, pos: pos}
		if err := addEntry(file, out, v); err != nil {
			return nil, err
		}
		return out, nil
	case *ast.SequenceNode:
		out := &node{kind: listNode, pos: pos}
		for _, it := range v.Values {
			c, err := convert(file, it)
			if err != nil {
				return nil, err
			}
			out.items = append(out.items, c)
		}
		return out, nil
	case *ast.NullNode:
		return &node{kind: scalarNode, null: true, pos: pos}, nil
	case *ast.StringNode:
		return &node{kind: scalarNode, scalar: v.Value, pos: pos}, nil
	case *ast.LiteralNode:
		return &node{kind: scalarNode, scalar: v.Value.Value, pos: pos}, nil
	case ast.ScalarNode:
		return &node{kind: scalarNode, scalar: fmt.Sprint(v.GetValue()), pos: pos}, nil
	}
	return nil, &config.Error{Pos: pos, Msg: fmt.Sprintf("unsupported YAML node %s", n.Type())}
}

func addEntry(file string, m *node, mv *ast.MappingValueNode) error {
	k, err := convert(file, mv.Key)
	if err != nil {
		return err
	}
	if k.kind != scalarNode {
		return &config.Error{Pos: k.pos, Msg: "a map key must be a string"}
	}
	for _, e := range m.entries {
		if e.key == k.scalar {
			return &config.Error{Pos: k.pos, Msg: fmt.Sprintf("duplicate key %q", k.scalar)}
		}
	}
	v, err := convert(file, mv.Value)
	if err != nil {
		return err
	}
	m.entries = append(m.entries, entry{key: strings.TrimSpace(k.scalar), pos: k.pos, val: v})
	return nil
}

// list is a list node's items; nil for anything else (and for nil).
func (n *node) list() []*node {
	if n == nil || n.kind != listNode {
		return nil
	}
	return n.items
}

// mapEntries is a map node's entries; nil for anything else (and for nil).
func (n *node) mapEntries() []entry {
	if n == nil || n.kind != mapNode {
		return nil
	}
	return n.entries
}
