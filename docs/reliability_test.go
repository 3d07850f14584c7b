package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// The packages whose answers docs/reliability.md lists: the exchange and
// the bindings' handlers.
var answeringPackages = []string{
	"../processor", "../processor/httpkafka", "../processor/grpckafka",
	"../processor/guard", "../processor/kafkaroute", "../processor/handler",
}

// statusesInCode returns the HTTP statuses (http.StatusX) and gRPC codes
// (codes.X) the answering packages' non-test files name.
func statusesInCode(t *testing.T) (httpStatuses map[int]string, grpcCodes map[string]string) {
	t.Helper()
	byName := map[string]int{}
	for c := 100; c < 600; c++ {
		if txt := http.StatusText(c); txt != "" {
			byName["Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(txt)] = c
		}
	}
	// Constants whose name is not the text run together.
	byName["StatusRequestEntityTooLarge"] = http.StatusRequestEntityTooLarge
	byName["StatusTeapot"] = http.StatusTeapot
	byName["StatusRequestURITooLong"] = http.StatusRequestURITooLong
	byName["StatusHTTPVersionNotSupported"] = http.StatusHTTPVersionNotSupported
	httpStatuses, grpcCodes = map[int]string{}, map[string]string{}
	fset := token.NewFileSet()
	for _, dir := range answeringPackages {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				where := fset.Position(sel.Pos()).String()
				switch {
				case pkg.Name == "http" && strings.HasPrefix(sel.Sel.Name, "Status") && sel.Sel.Name != "StatusText":
					c, ok := byName[sel.Sel.Name]
					if !ok {
						t.Errorf("%s: http.%s is not a status this test knows", where, sel.Sel.Name)
					}
					httpStatuses[c] = where
				case pkg.Name == "codes" && sel.Sel.Name != "Code" && sel.Sel.Name != "Error":
					grpcCodes[sel.Sel.Name] = where
				}
				return true
			})
		}
	}
	return httpStatuses, grpcCodes
}

// Every status the processor answers, and every status Envoy answers in
// our envoy.yaml for a failed or unanswered exchange, has its row in
// docs/reliability.md.
func TestReliabilityStatusesComplete(t *testing.T) {
	b, err := os.ReadFile("reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	processor, envoySection, ok := strings.Cut(doc, "## Answers of Envoy")
	if !ok {
		t.Fatal(`docs/reliability.md has no "## Answers of Envoy" section`)
	}
	// The cells of the first two columns of a table's rows.
	rowRe := regexp.MustCompile(`(?m)^\| ([^|]*) \| ([^|]*) \|`)
	cells := func(section string) (httpCol, grpcCol string) {
		for _, m := range rowRe.FindAllStringSubmatch(section, -1) {
			httpCol += " " + m[1]
			grpcCol += " " + m[2]
		}
		return httpCol, grpcCol
	}
	httpCol, grpcCol := cells(processor)
	hs, gs := statusesInCode(t)
	if len(hs) < 10 || len(gs) < 10 {
		t.Fatalf("found only %d HTTP statuses and %d gRPC codes in the code", len(hs), len(gs))
	}
	for c, where := range hs {
		if c == http.StatusOK || c == http.StatusCreated {
			c = http.StatusOK // a reply's status: the "200 201 …" row
		}
		if !strings.Contains(httpCol, "`"+strconv.Itoa(c)+"`") {
			t.Errorf("HTTP %d (used at %s) has no row in docs/reliability.md", c, where)
		}
	}
	camel := regexp.MustCompile("([a-z])([A-Z])")
	for name, where := range gs {
		upper := strings.ToUpper(camel.ReplaceAllString(name, "${1}_${2}")) // DeadlineExceeded → DEADLINE_EXCEEDED
		if !strings.Contains(grpcCol, "`"+upper+"`") {
			t.Errorf("gRPC %s (used at %s) has no row in docs/reliability.md", upper, where)
		}
	}

	// Envoy's answers for an exchange that failed or was not answered.
	boot, err := envoy.Parse(envoy.DefaultYAML())
	if err != nil {
		t.Fatal(err)
	}
	s, err := envoy.SettingsFrom(boot)
	if err != nil {
		t.Fatal(err)
	}
	envoyHTTP, _ := cells(envoySection)
	if !strings.Contains(envoyHTTP, "`"+strconv.Itoa(s.ExtProc.StatusOnError)+"`, empty body") {
		t.Errorf("envoy.yaml's status_on_error %d has no row in docs/reliability.md", s.ExtProc.StatusOnError)
	}
	for _, r := range s.Routes {
		if r.DirectResponseStatus != 0 && !strings.Contains(envoyHTTP, "`"+strconv.Itoa(r.DirectResponseStatus)+"` \""+strings.TrimSpace(r.DirectResponseBody)+"\"") {
			t.Errorf("envoy.yaml route %q answers %d %q: no row in docs/reliability.md", r.Name, r.DirectResponseStatus, r.DirectResponseBody)
		}
	}
	if readme, err := os.ReadFile("../README.md"); err != nil || !strings.Contains(string(readme), "(docs/reliability.md)") {
		t.Errorf("README.md does not link docs/reliability.md (%v)", err)
	}
}
