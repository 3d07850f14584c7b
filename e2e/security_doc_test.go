package e2e_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// SECURITY.md's table of hostile inputs names the tests that show each
// answer. This test keeps the document honest: every named test (Test… or
// Fuzz…, optionally /subtest as written in t.Run) must exist in the
// repository, every row must name one, and every audit test must be in the
// table; the fuzz table lists exactly the fuzz targets there are. It also
// checks the defaults the trust model states.
func TestSecurityDocNamesExistingTests(t *testing.T) {
	t.Parallel()
	root := ".."
	doc, err := os.ReadFile(filepath.Join(root, "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}

	// Test sources: name → the files declaring it.
	funcRe := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w+)\(`)
	declared := map[string][]string{}
	sources := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel, err := filepath.Rel(root, path); err == nil {
			path = filepath.ToSlash(rel)
		}
		sources[path] = string(b)
		for _, m := range funcRe.FindAllStringSubmatch(string(b), -1) {
			declared[m[1]] = append(declared[m[1]], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	rows := tableRows(t, string(doc), "## Hostile inputs")
	if len(rows) < 20 {
		t.Fatalf("SECURITY.md's table has %d rows; is the heading or the table format changed?", len(rows))
	}
	nameRe := regexp.MustCompile("`([^`]+)`")
	validName := regexp.MustCompile(`^(?:Test|Fuzz)\w+(?:/.+)?$`)
	named := map[string]bool{}
	for _, row := range rows {
		cells := strings.Split(strings.Trim(row, "|"), "|")
		last := cells[len(cells)-1]
		refs := nameRe.FindAllStringSubmatch(last, -1)
		if len(refs) == 0 {
			t.Errorf("row names no test: %s", row)
		}
		for _, ref := range refs {
			name := ref[1]
			if !validName.MatchString(name) {
				t.Errorf("%q in the last column is not a test name (Test… or Fuzz…, optionally /subtest)", name)
				continue
			}
			fn, sub, _ := strings.Cut(name, "/")
			named[fn] = true
			files, ok := declared[fn]
			if !ok {
				t.Errorf("SECURITY.md names %s, which no _test.go file declares", fn)
				continue
			}
			if sub == "" {
				continue
			}
			found := false
			for _, f := range files {
				found = found || strings.Contains(sources[f], "t.Run("+strconv.Quote(sub)+",")
			}
			if !found {
				t.Errorf("SECURITY.md names %s, but %s has no t.Run(%q, …)", name, strings.Join(files, ", "), sub)
			}
		}
	}
	for fn := range declared {
		if strings.HasPrefix(fn, "TestAudit") && !named[fn] {
			t.Errorf("%s is not in SECURITY.md's table: say what it shows", fn)
		}
	}

	// The fuzz table lists exactly the fuzz targets there are.
	listed := map[string]bool{}
	for _, row := range tableRows(t, string(doc), "## Fuzz targets") {
		if m := nameRe.FindStringSubmatch(row); m != nil {
			listed[m[1]] = true
			if _, ok := declared[m[1]]; !ok || !strings.HasPrefix(m[1], "Fuzz") {
				t.Errorf("SECURITY.md lists fuzz target %s, which no _test.go file declares", m[1])
			}
		}
	}
	for fn := range declared {
		if strings.HasPrefix(fn, "Fuzz") && !listed[fn] {
			t.Errorf("fuzz target %s is not in SECURITY.md's fuzz table", fn)
		}
	}

	// The defaults the trust model states are the binary's.
	serve, err := os.ReadFile(filepath.Join(root, "cmd", "kafka-ext-proc", "serve.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`127.0.0.1:50051`") || !strings.Contains(string(serve), `fs.String("listen", "127.0.0.1:50051"`) {
		t.Error("--listen: SECURITY.md and serve.go disagree on the default (127.0.0.1:50051)")
	}
	if !strings.Contains(string(serve), `fs.String("admin", "127.0.0.1:`) {
		t.Error("--admin: SECURITY.md says it defaults to loopback; serve.go does not")
	}
	for _, flag := range []string{"--tls-cert", "--tls-key", "--tls-client-ca"} {
		if !strings.Contains(string(serve), `"`+strings.TrimPrefix(flag, "--")+`"`) {
			t.Errorf("SECURITY.md documents %s, which serve does not have", flag)
		}
	}
}

// tableRows returns the body rows of the first Markdown table after heading.
func tableRows(t *testing.T, doc, heading string) []string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("SECURITY.md has no %q section", heading)
	}
	var rows []string
	inTable := false
	for _, line := range strings.Split(after, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "|"):
			inTable = true
			rows = append(rows, line)
		case inTable:
			if len(rows) < 2 {
				t.Fatal("SECURITY.md's table has no body")
			}
			return rows[2:] // without the header and the separator
		}
	}
	if len(rows) < 2 {
		t.Fatal("SECURITY.md's table has no body")
	}
	return rows[2:]
}
