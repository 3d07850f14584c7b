package deploy

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
}

func dockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Fatalf("%s %s: use the exec (JSON) form: %v", in.cmd, in.args, err)
	}
	return v
}

// debianRelease maps the Debian code names image tags use to release numbers.
func debianRelease(codename string) string {
	return map[string]string{"bookworm": "12", "trixie": "13"}[codename]
}

// The image: stages from pinned images, a Go as new as go.mod's, a runtime
// stage on the build stage's Debian release (the binary links the build's
// glibc), a non-root user, the binary as entrypoint, and the CMD the compose
// file spells out.
func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	var froms []string
	var user, entrypoint, cmd []string
	var cgo bool
	var buildTags, ldflags string
	args := map[string]bool{}
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			image, _, _ := strings.Cut(in.args, " ")
			froms = append(froms, image)
			if err := pinned(image); err != nil {
				t.Error(err)
			}
			user = nil // USER is per stage
		case "USER":
			user = strings.Fields(in.args)
		case "ENTRYPOINT":
			entrypoint = execForm(t, in)
		case "CMD":
			cmd = execForm(t, in)
		case "ARG":
			name, _, _ := strings.Cut(in.args, "=")
			args[name] = true
		case "RUN":
			if strings.Contains(in.args, "go build") {
				if m := regexp.MustCompile(`-ldflags="([^"]*)"`).FindStringSubmatch(in.args); m != nil {
					ldflags = m[1]
				}
				if !args["REVISION"] {
					t.Error("the go build comes before ARG REVISION: the commit cannot reach the linker")
				}
				cgo = strings.Contains(in.args, "CGO_ENABLED=1")
				if f := strings.Fields(in.args); slices.Contains(f, "-tags") {
					buildTags = f[slices.Index(f, "-tags")+1]
				}
			}
		}
	}
	if len(froms) != 2 {
		t.Fatalf("stages %v, want build and runtime", froms)
	}

	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goMod string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			goMod = strings.TrimSpace(v)
		}
	}
	build, runtime := froms[0], froms[1]
	buildRef, _, _ := strings.Cut(build, "@")
	goTag, ok := strings.CutPrefix(buildRef, "golang:")
	if !ok {
		t.Fatalf("build stage %q is not the golang image", build)
	}
	goVersion, codename, _ := strings.Cut(goTag, "-")
	if goVersion != goMod {
		t.Errorf("build stage Go %s, go.mod says go %s: the build would need to fetch a toolchain", goVersion, goMod)
	}
	release := debianRelease(codename)
	if release == "" {
		t.Errorf("build stage %q: name the Debian release (e.g. -bookworm) so the runtime stage can match its glibc", build)
	}
	if !strings.HasPrefix(runtime, "debian:"+release+".") && !strings.Contains(runtime, "-debian"+release) {
		t.Errorf("runtime stage %q is not Debian %s like the build stage %q: the binary needs a glibc at least as new as the build's", runtime, release, build)
	}
	if !cgo {
		t.Error("the go build does not set CGO_ENABLED=1: librdkafka is linked through cgo")
	}
	// The README says the image has no shell; distroless has none.
	if !strings.HasPrefix(runtime, "gcr.io/distroless/") {
		t.Errorf("runtime stage %q is not distroless: the image would carry a shell", runtime)
	}
	checkRevisionFlag(t, ldflags)
	if buildTags != "nodev" {
		t.Errorf("the go build's -tags %q, want nodev: the production binary leaves the development stack out", buildTags)
	}

	if len(user) != 1 || user[0] == "root" || user[0] == "0" || strings.HasPrefix(user[0], "0:") {
		t.Errorf("runtime USER %v: run as a non-root user", user)
	}
	if !slices.Equal(entrypoint, []string{"/kafka-ext-proc"}) {
		t.Errorf("ENTRYPOINT %q, want [/kafka-ext-proc]", entrypoint)
	}
	s := loadStack(t)
	if want := s.compose.Services[processorSvc].Command; !slices.Equal(cmd, want) {
		t.Errorf("CMD %q differs from the compose command %q", cmd, want)
	}
}

// The context has no .git, so the commit reaches the binary through the
// linker: -X must name a package-level string that exists, or the linker
// ignores it and the image reports commit "unknown"; compose passes REVISION.
func checkRevisionFlag(t *testing.T, ldflags string) {
	t.Helper()
	m := regexp.MustCompile(`-X (\S+)\.(\w+)=\$\{REVISION\}`).FindStringSubmatch(ldflags)
	if m == nil {
		t.Fatalf("the go build's -ldflags %q set no variable from ${REVISION}", ldflags)
	}
	pkg, name := m[1], m[2]
	rel, ok := strings.CutPrefix(pkg, "github.com/kafka-ext-proc/kafka-ext-proc/")
	if !ok {
		t.Fatalf("-X names %s, outside this module", pkg)
	}
	dir := filepath.Join(root, rel)
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("-X names %s: no Go files in %s (%v)", pkg, rel, err)
	}
	found := false
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				typ, _ := vs.Type.(*ast.Ident)
				for _, n := range vs.Names {
					found = found || (n.Name == name && typ != nil && typ.Name == "string" && len(vs.Values) == 0)
				}
			}
		}
	}
	if !found {
		t.Errorf("-X %s.%s: no package-level `var %s string` without a value there; the linker would set nothing", pkg, name, name)
	}
	s := loadStack(t)
	b, _ := s.compose.Services[processorSvc].Build.(map[string]any)
	bargs, _ := b["args"].(map[string]any)
	if _, ok := bargs["REVISION"]; !ok {
		t.Errorf("the compose build %v passes no REVISION argument", s.compose.Services[processorSvc].Build)
	}
}

// devPackages are what only `kafka-ext-proc dev` needs: the embedded broker
// (kfake) and the Envoy emulator.
var devPackages = regexp.MustCompile(`^(github\.com/twmb/franz-go/pkg/kfake|github\.com/kafka-ext-proc/kafka-ext-proc/(kafkaio/embedded|envoy/emulator))$`)

func devDeps(t *testing.T, tags string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", tags, "-deps", "./cmd/kafka-ext-proc")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		if devPackages.MatchString(p) {
			found = append(found, p)
		}
	}
	return found
}

// The image's build tag leaves the development stack out of the binary, and
// the default build (`go run ./cmd/kafka-ext-proc dev`) keeps it.
func TestProductionBuildLeavesDevOut(t *testing.T) {
	if got := devDeps(t, "nodev"); len(got) != 0 {
		t.Errorf("-tags nodev still links %v", got)
	}
	if got := devDeps(t, ""); len(got) != 3 {
		t.Errorf("the default build links %v of the development stack, want kfake, kafkaio/embedded and envoy/emulator (so the check above can see them)", got)
	}
}
