package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/readmetest"
	_ "github.com/kafka-ext-proc/kafka-ext-proc/proto/example" // the grpcurl steps' services
	_ "google.golang.org/grpc/examples/features/proto/echo"    // grpc.kafka.proxy's service
)

// repoRoot is where the READMEs' commands run.
const repoRoot = "../.."

// The examples and their READMEs: each README's steps run as written, from
// `go run ./cmd/kafka-ext-proc dev --config examples/<name>/config.yaml`
// (started here in-process, through the same entry point and flags, on
// loopback ports) to every curl, grpcurl and kcat line, whose output must be
// what the README shows.
func TestExamples(t *testing.T) {
	readmes, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range readmes {
		names = append(names, filepath.Base(filepath.Dir(r)))
	}
	for _, want := range []string{"http.kafka.crud", "http.kafka.async", "http.kafka.cache", "http.kafka.sync", "http.kafka.oneway", "grpc.kafka.echo", "grpc.kafka.fanout", "grpc.kafka.proxy", "http.kafka.avro", "service-responder", "sse.kafka.fanout"} {
		if !slices.Contains(names, want) {
			t.Errorf("no examples/%s/README.md", want)
		}
	}
	for i, readme := range readmes {
		name := names[i]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(readme)
			if err != nil {
				t.Fatal(err)
			}
			steps, err := readmetest.Parse(string(b), "## Steps")
			if err != nil {
				t.Fatalf("%s: %v", readme, err)
			}
			readmetest.Run(t, steps, readmetest.Env{Root: repoRoot, Start: func(t *testing.T, args []string) (string, string) {
				return devRun(t, exampleDevArgs(t, name, args)...)
			}, Program: exampleProgram})
		})
	}
}

// exampleDevArgs checks that a README starts `dev` with its own example's
// configuration and makes the paths of the arguments relative to this
// package's directory (the README's are relative to the repository root).
func exampleDevArgs(t *testing.T, example string, args []string) []string {
	t.Helper()
	if len(args) == 0 || args[0] != "dev" {
		t.Fatalf("the start command is not `go run ./cmd/kafka-ext-proc dev ...`: %q", args)
	}
	args = slices.Clone(args[1:])
	config := ""
	for i := 0; i < len(args); i++ {
		name, value, inline := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if name != "config" && name != "envoy" {
			continue
		}
		if !inline {
			if i+1 >= len(args) {
				t.Fatalf("--%s without a value", name)
			}
			i++
			value = args[i]
		}
		if name == "config" {
			config = value
		}
		args[i] = "--" + name + "=" + filepath.Join(repoRoot, value)
		if !inline {
			args[i-1], args[i] = args[i], ""
		}
	}
	if want := "examples/" + example + "/config.yaml"; config != want {
		t.Fatalf("the README starts dev with --config %q, want %s", config, want)
	}
	return slices.DeleteFunc(args, func(a string) bool { return a == "" })
}

// exampleProgram builds and starts an example's own program (a service of
// the example's) as `go run` would, stops it when the test ends, and
// returns its first line of output: a program says it is ready by printing
// it.
func exampleProgram(ctx context.Context, t *testing.T, dir string, args []string) (string, error) {
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, dir)
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", dir, err, out)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = testLog{t}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting %s: %w", dir, err)
	}
	first, read := make(chan string, 1), make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-read // the pipe is read to its end before Wait closes it
		_ = cmd.Wait()
	})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text() + "\n"
		}
		close(first)
		for sc.Scan() {
			t.Log(sc.Text())
		}
	}()
	select {
	case line, ok := <-first:
		if !ok {
			return "", errors.New(dir + " ended without printing anything")
		}
		return line, nil
	case <-ctx.Done():
		return "", fmt.Errorf("%s printed nothing: %w", dir, ctx.Err())
	}
}

// testLog writes a program's standard error to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
