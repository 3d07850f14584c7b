package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every package and Go file architecture.md names in backquotes exists, so
// the page cannot keep describing a package that was moved or removed.
func TestArchitectureNamesExistingPackages(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	missing, checked := missingPaths(string(doc), "..")
	if checked < 15 {
		t.Fatalf("found only %d package or file names in architecture.md: the scan is broken", checked)
	}
	for _, p := range missing {
		t.Errorf("architecture.md names %s, which does not exist", p)
	}
}

// The check fails on a page naming a package that does not exist.
func TestArchitectureCheckCatchesAMissingPackage(t *testing.T) {
	missing, checked := missingPaths("`processor/httpkafka`, `processor/gone`, `kafkaio/nothere.go`", "..")
	if checked != 3 || len(missing) != 2 || missing[0] != "processor/gone" || missing[1] != "kafkaio/nothere.go" {
		t.Fatalf("checked %d, missing %v", checked, missing)
	}
}

// pathRef is a backquoted repository path: a top-level directory of the
// module, then more segments, ending in a package or a .go file.
var pathRef = regexp.MustCompile("`((?:admin|cmd|docs|e2e|envoy|internal|kafkaio|openapi|processor|proto|responder|stack)(?:/[a-z0-9_.-]+)*)`")

// missingPaths returns the paths doc names that are not a directory holding
// Go files (a package) or a Go file under root, and how many it checked.
func missingPaths(doc, root string) (missing []string, checked int) {
	for _, m := range pathRef.FindAllStringSubmatch(doc, -1) {
		p := m[1]
		checked++
		full := filepath.Join(root, filepath.FromSlash(p))
		if strings.HasSuffix(p, ".go") {
			if st, err := os.Stat(full); err != nil || st.IsDir() {
				missing = append(missing, p)
			}
			continue
		}
		if files, _ := filepath.Glob(filepath.Join(full, "*.go")); len(files) == 0 {
			missing = append(missing, p)
		}
	}
	return missing, checked
}
