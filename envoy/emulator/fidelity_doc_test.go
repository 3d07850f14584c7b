package emulator

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update", false, "rewrite docs/envoy-fidelity.md from the rule marks")

// fidelityDoc is the generated document, relative to this package.
const fidelityDoc = "../../docs/envoy-fidelity.md"

const (
	tableBegin = "<!-- rules:begin: generated from the [rule] marks in envoy/emulator by TestFidelityDoc; do not edit -->"
	tableEnd   = "<!-- rules:end -->"
)

// rule is one [rule] mark in the emulator's comments:
//
//	// [rule id] what Envoy does, on one or more lines
//	// source: Envoy source file and function(s)
//	// envoy-test: Envoy's test(s), or none
//	// ours: our test(s), comma-separated (e2e.TestX for an end-to-end test)
//	// UNVERIFIED: why (optional: a part not read in Envoy)
type rule struct {
	id, text, source, envoyTest, ours, unverified, file string
}

var ruleStart = regexp.MustCompile(`^// \[rule ([a-z0-9-]+)\] (.+)$`)

// parseRules reads the marks of the package's non-test files, in file
// order. Malformed marks are errors.
func parseRules(dir string) ([]rule, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var rules []rule
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		rs, err := parseFileRules(f)
		if err != nil {
			return nil, err
		}
		rules = append(rules, rs...)
	}
	return rules, nil
}

func parseFileRules(path string) ([]rule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		rules []rule
		cur   *rule
		field string // the field the next comment line continues
	)
	name := filepath.Base(path)
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if m := ruleStart.FindStringSubmatch(line); m != nil {
			if cur != nil {
				return nil, fmt.Errorf("%s:%d: rule %s starts inside rule %s", name, n, m[1], cur.id)
			}
			cur, field = &rule{id: m[1], text: m[2], file: name}, "text"
			continue
		}
		if cur == nil {
			if strings.Contains(line, "UNVERIFIED") && name != "doc.go" {
				return nil, fmt.Errorf("%s:%d: UNVERIFIED outside a [rule] mark", name, n)
			}
			continue
		}
		c, isComment := strings.CutPrefix(line, "//")
		c = strings.TrimSpace(c)
		if !isComment || c == "" {
			if cur.source == "" || cur.envoyTest == "" || cur.ours == "" {
				return nil, fmt.Errorf("%s:%d: rule %s lacks source:, envoy-test: or ours:", name, n, cur.id)
			}
			rules = append(rules, *cur)
			cur = nil
			continue
		}
		key, val, _ := strings.Cut(c, ": ")
		switch key {
		case "source", "envoy-test", "ours", "UNVERIFIED":
			field = key
			c = val
		}
		dst := map[string]*string{"text": &cur.text, "source": &cur.source, "envoy-test": &cur.envoyTest,
			"ours": &cur.ours, "UNVERIFIED": &cur.unverified}[field]
		if *dst != "" {
			*dst += " "
		}
		*dst += c
	}
	if cur != nil {
		rules = append(rules, *cur)
	}
	return rules, sc.Err()
}

// testFuncs lists the Test functions of the Go files in dir.
func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	out := map[string]bool{}
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
				out[fd.Name.Name] = true
			}
		}
	}
	return out
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func renderRules(rules []rule) string {
	var b strings.Builder
	b.WriteString(tableBegin + "\n\n")
	b.WriteString("| Rule | What Envoy does | Envoy source | Envoy test | Our test |\n|---|---|---|---|---|\n")
	for _, r := range rules {
		text := r.text
		if r.unverified != "" {
			text += " **UNVERIFIED:** " + r.unverified
		}
		ours := strings.Split(r.ours, ", ")
		for i, o := range ours {
			ours[i] = "`" + o + "`"
		}
		fmt.Fprintf(&b, "| `%s` (%s) | %s | %s | %s | %s |\n", r.id, r.file, cell(text), cell(r.source), cell(r.envoyTest), strings.Join(ours, ", "))
	}
	b.WriteString("\n" + tableEnd)
	return b.String()
}

// TestFidelityDoc keeps docs/envoy-fidelity.md's table equal to the rule
// marks in the code, and every mark complete: its tests exist, ids are
// unique. -update rewrites the table.
func TestFidelityDoc(t *testing.T) {
	rules, err := parseRules(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) < 10 {
		t.Fatalf("only %d rule marks found", len(rules))
	}
	ours, e2e := testFuncs(t, "."), testFuncs(t, "../../e2e")
	seen := map[string]bool{}
	for _, r := range rules {
		if seen[r.id] {
			t.Errorf("rule %s is marked twice", r.id)
		}
		seen[r.id] = true
		if !strings.Contains(r.source, "source/") && !strings.Contains(r.source, "envoy/") && !strings.Contains(r.source, "api/") {
			t.Errorf("rule %s: source %q names no file of Envoy's tree", r.id, r.source)
		}
		for _, o := range strings.Split(r.ours, ", ") {
			name, isE2E := strings.CutPrefix(o, "e2e.")
			if (isE2E && !e2e[name]) || (!isE2E && !ours[name]) {
				t.Errorf("rule %s: our test %q does not exist", r.id, o)
			}
		}
	}

	if readme, err := os.ReadFile("../../README.md"); err != nil || !strings.Contains(string(readme), "(docs/envoy-fidelity.md)") {
		t.Errorf("README.md does not link docs/envoy-fidelity.md (%v)", err)
	}
	doc, err := os.ReadFile(fidelityDoc)
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(doc), tableBegin), strings.Index(string(doc), tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated table between its markers", fidelityDoc)
	}
	have, want := string(doc[i:j+len(tableEnd)]), renderRules(rules)
	if have == want {
		return
	}
	if *updateDoc {
		if err := os.WriteFile(fidelityDoc, []byte(string(doc[:i])+want+string(doc[j+len(tableEnd):])), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of step with the [rule] marks; run go test ./envoy/emulator -run TestFidelityDoc -update\nwant:\n%s", fidelityDoc, want)
}

// The parser refuses incomplete marks and stray UNVERIFIED notes, so a mark
// cannot silently drop out of the document.
func TestFidelityDocParser(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"no ours":       "package x\n// [rule a-b] text\n// source: source/x.cc F\n// envoy-test: none\nfunc f() {}\n",
		"no source":     "package x\n// [rule a-b] text\n// envoy-test: none\n// ours: TestX\n\nfunc f() {}\n",
		"stray":         "package x\n// an assumption (UNVERIFIED)\nfunc f() {}\n",
		"nested":        "package x\n// [rule a] t\n// [rule b] t\n// source: source/x.cc F\n// envoy-test: none\n// ours: TestX\nfunc f() {}\n",
		"no blank stop": "package x\n// [rule a-b] text\nfunc f() {}\n",
	} {
		p := filepath.Join(dir, "x.go")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if rs, err := parseFileRules(p); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, rs)
		}
	}
	p := filepath.Join(dir, "ok.go")
	src := "package x\n\t// [rule a-b] Envoy does\n\t// this.\n\t// source: source/x.cc F\n\t// envoy-test: T.a\n\t// ours: TestX, e2e.TestY\n\t// UNVERIFIED: why\nfunc f() {}\n"
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := parseFileRules(p)
	want := rule{id: "a-b", text: "Envoy does this.", source: "source/x.cc F", envoyTest: "T.a", ours: "TestX, e2e.TestY", unverified: "why", file: "ok.go"}
	if err != nil || len(rs) != 1 || rs[0] != want {
		t.Errorf("parsed %+v %v, want %+v", rs, err, want)
	}
}
