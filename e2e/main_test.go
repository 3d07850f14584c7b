package e2e_test

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parallel is how many tests run at once when -parallel is not given. The
// tests wait on Kafka and on the timeouts they exercise far more than they
// compute (the package uses about a quarter of a core run one at a time),
// so four at a time fits a two-core machine; -parallel N still decides.
const parallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", parallel); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// Every test either runs in parallel or says why it is serial, so a new
// test cannot quietly lengthen the package's run by the whole of its own.
func TestEveryTestIsParallelOrSaysWhyNot(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) < 20 {
		t.Fatalf("test files: %v (%d found): the scan is broken", err, len(files))
	}
	checked := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" || fn.Body == nil || len(fn.Body.List) == 0 {
				continue
			}
			checked++
			if !callsParallel(fn.Body.List[0]) && !saysSerial(f, fset, fn) {
				t.Errorf("%s: %s neither calls t.Parallel() first nor says why it is serial (a \"// Serial: why\" comment first)", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d tests: the scan is broken", checked)
	}
}

func callsParallel(s ast.Stmt) bool {
	e, ok := s.(*ast.ExprStmt)
	if !ok {
		return false
	}
	c, ok := e.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Parallel"
}

// saysSerial: a "// Serial:" comment opens the test's body.
func saysSerial(f *ast.File, fset *token.FileSet, fn *ast.FuncDecl) bool {
	open := fset.Position(fn.Body.Lbrace).Line
	for _, g := range f.Comments {
		if fset.Position(g.Pos()).Line == open+1 && strings.HasPrefix(g.List[0].Text, "// Serial:") {
			return true
		}
	}
	return false
}
