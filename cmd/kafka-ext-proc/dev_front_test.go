//go:build !nodev

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// dev on an imported configuration: without --front the emulator listens on
// the port of the Envoy file's first listener (an imported example's port,
// as Zilla's commands name it; the bundled file's 8080 otherwise), and the
// banner lists the topics it created.
func TestDevFollowsTheImportedListener(t *testing.T) {
	_, envoyFile := importZilla(t, filepath.Join(zillaExamples, "grpc.kafka.echo.yaml"))
	imported, err := os.ReadFile(envoyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		yaml []byte
		want string
	}{{imported, "127.0.0.1:7151"}, {envoy.DefaultYAML(), "127.0.0.1:8080"}} {
		if got, err := frontOf(c.yaml); err != nil || got != c.want {
			t.Errorf("front %q (%v), want %q", got, err, c.want)
		}
	}

	cfg, _ := importZilla(t, filepath.Join(zillaExamples, "http.kafka.crud.yaml"))
	_, _, banner, _ := devStart(t, "--config", cfg, "--topic", "extra:3")
	want := "topics:                 extra (3 partitions), items (compacted)"
	if !slices.ContainsFunc(banner, func(l string) bool { return strings.TrimSpace(l) == strings.TrimSpace(want) }) {
		t.Errorf("the banner does not list the topics as %q:\n%s", want, strings.Join(banner, "\n"))
	}
}

// -h prints a command's usage once, and dev's line of the usage text names
// every flag dev takes.
func TestHelpOnceAndComplete(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"import", "zilla", "--help"}, io.Discard, &stderr); code != 0 || strings.Count(stderr.String(), "Usage of kafka-ext-proc import zilla") != 1 {
		t.Errorf("import zilla --help: exit %d, printed\n%s\nwant the usage once", code, stderr.String())
	}
	stderr.Reset()
	if _, err := parseDevFlags([]string{"-h"}, &stderr); err == nil {
		t.Fatal("dev -h parsed")
	}
	_, devLines, _ := strings.Cut(usage, "kafka-ext-proc dev ")
	devLines, _, _ = strings.Cut(devLines, "kafka-ext-proc validate")
	for _, line := range strings.Split(stderr.String(), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "-")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		if !strings.Contains(devLines, "--"+name+" ") && !strings.Contains(devLines, "--"+name+"]") {
			t.Errorf("the usage's dev line lacks --%s:\n%s", name, devLines)
		}
	}
}
