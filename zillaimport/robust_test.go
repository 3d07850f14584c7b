package zillaimport

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exampleInputs are the zilla.yaml files of testdata: every example, the
// file holding every field, and the ones refused.
func exampleInputs(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".imported.yaml") && !strings.HasSuffix(f, ".envoy.yaml") {
			out = append(out, f)
		}
	}
	return append(out, "testdata/all-fields.yaml")
}

// importNoPanic runs Import and turns a panic into an error that says which
// input caused it.
func importNoPanic(what string, src []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: the importer panicked: %v", what, r)
		}
	}()
	_, _ = Import("zilla.yaml", src)
	return nil
}

// Whatever field of whatever example is taken away (a map entry or a list
// item, at any depth), the importer answers with a configuration or an
// error, never a panic: a user's half-written zilla.yaml is the normal case
// while migrating.
func TestImportWithAnyFieldRemovedNeverPanics(t *testing.T) {
	for _, f := range exampleInputs(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			root, err := parse(f, src)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for path, without := range removals(root, "") {
				n++
				b, err := json.Marshal(plain(without))
				if err != nil {
					t.Fatal(err)
				}
				if err := importNoPanic(filepath.Base(f)+" without "+path, b); err != nil {
					t.Error(err)
				}
			}
			if n < 10 {
				t.Errorf("%s: only %d removals tried", f, n)
			}
		})
	}
}

// removals yields, for every map entry and list item under n, its path and
// a copy of the whole tree (n being its root) without it.
func removals(n *node, at string) map[string]*node {
	out := map[string]*node{}
	switch n.kind {
	case mapNode:
		for i, e := range n.entries {
			cp := *n
			cp.entries = append(append([]entry{}, n.entries[:i]...), n.entries[i+1:]...)
			out[at+"."+e.key] = &cp
			for p, sub := range removals(e.val, at+"."+e.key) {
				cp := *n
				cp.entries = append([]entry{}, n.entries...)
				cp.entries[i].val = sub
				out[p] = &cp
			}
		}
	case listNode:
		for i, it := range n.items {
			p := fmt.Sprintf("%s[%d]", at, i)
			cp := *n
			cp.items = append(append([]*node{}, n.items[:i]...), n.items[i+1:]...)
			out[p] = &cp
			for p, sub := range removals(it, p) {
				cp := *n
				cp.items = append([]*node{}, n.items...)
				cp.items[i] = sub
				out[p] = &cp
			}
		}
	}
	return out
}

// plain is a node as JSON values (JSON is YAML), in file order.
func plain(n *node) any {
	switch n.kind {
	case mapNode:
		m := orderedJSON{}
		for _, e := range n.entries {
			m = append(m, [2]any{e.key, plain(e.val)})
		}
		return m
	case listNode:
		l := []any{}
		for _, it := range n.items {
			l = append(l, plain(it))
		}
		return l
	}
	if n.null {
		return nil
	}
	return n.scalar
}

// orderedJSON is a JSON object whose keys keep their order.
type orderedJSON [][2]any

func (o orderedJSON) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv[0])
		v, err := json.Marshal(kv[1])
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// FuzzImport: any input is answered with a result or an error, never a
// panic. The seeds are the examples.
func FuzzImport(f *testing.F) {
	for _, file := range exampleInputs(f) {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if err := importNoPanic("the input", src); err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
	})
}
