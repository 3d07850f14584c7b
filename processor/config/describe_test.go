package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestDescribe(t *testing.T) {
	for _, name := range []string{"full", "minimal"} {
		t.Run(name, func(t *testing.T) {
			cfg := loadValid(t, name+".yaml")
			var buf bytes.Buffer
			Describe(cfg, &buf)
			golden := filepath.Join("testdata", "describe", name+".txt")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("Describe:\n%s\nwant (%s; go test -update rewrites it):\n%s", buf.Bytes(), golden, want)
			}
		})
	}
}

// TestDescribeCoversTheShape: every field of the file is either printed by
// Describe, under the column or key its shown names (found in Describe's
// output of full.yaml, which uses every such field), or left out for the
// reason its hidden gives. A field added to shape.go without saying which
// fails here.
func TestDescribeCoversTheShape(t *testing.T) {
	var buf bytes.Buffer
	Describe(loadValid(t, "full.yaml"), &buf)
	out := buf.String()
	checked := 0
	walkShown(newShape().top, "", map[*section]bool{}, func(path string, f field) {
		checked++
		switch {
		case (f.shown == "") == (f.hidden == ""):
			t.Errorf("%s: set shown (the column or key Describe prints it under) or hidden (why Describe leaves it out), not both or neither", path)
		case f.shown != "" && !strings.Contains(out, f.shown):
			t.Errorf("%s is shown as %q, which Describe does not print for testdata/valid/full.yaml", path, f.shown)
		}
	})
	if checked < 60 {
		t.Fatalf("walked only %d fields: the walk is broken", checked)
	}
}

// walkShown calls visit for each field reachable from sec through fields
// that are not hidden.
func walkShown(sec *section, path string, seen map[*section]bool, visit func(string, field)) {
	if seen[sec] {
		return
	}
	seen[sec] = true
	for _, f := range sec.fields {
		p := strings.TrimPrefix(path+"."+f.name, ".")
		visit(p, f)
		if f.hidden == "" {
			walkSchema(f.schema, p, seen, visit)
		}
	}
}

func walkSchema(v any, path string, seen map[*section]bool, visit func(string, field)) {
	switch v := v.(type) {
	case *section:
		walkShown(v, path, seen, visit)
	case *union:
		for _, x := range v.variants {
			walkShown(x.section, path, seen, visit)
		}
	case *named:
		walkSchema(v.schema, path, seen, visit)
	case obj:
		for _, m := range v {
			walkSchema(m.val, path, seen, visit)
		}
	case arr:
		for _, x := range v {
			walkSchema(x, path, seen, visit)
		}
	}
}
