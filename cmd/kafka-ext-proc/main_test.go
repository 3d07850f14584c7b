package main

import (
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// The package comment lists the commands as the usage text does, so that
// go doc and -h never disagree on what the binary can do.
func TestPackageCommentListsUsage(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	n := 0
	for line := range strings.Lines(usage) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "kafka-ext-proc ") && !strings.HasPrefix(line, "[") {
			continue
		}
		n++
		if !strings.Contains(doc, line) {
			t.Errorf("the package comment lacks the usage line %q", line)
		}
	}
	if n < 8 {
		t.Errorf("found %d usage lines, want the 8 commands at least", n)
	}
}
