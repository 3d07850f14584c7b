//go:build !nodev

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dev runs a configuration whose catalogs name a Schema Registry with an
// embedded one: the banner names it and the catalogs pointed at it, schemas
// given with --schema are there before the processor starts, and the
// catalog's url variable, which dev replaced, need not be set.
func TestDevEmbeddedRegistry(t *testing.T) {
	cfg, envoyFile := importZilla(t, filepath.Join(zillaExamples, "http.kafka.karapace.yaml"))
	_, _, banner, _ := devStart(t, "--config", cfg, "--envoy", envoyFile, "--registry", "127.0.0.1:0",
		"--schema", "items-value="+filepath.Join(zillaExamples, "item.avsc"))
	text := strings.Join(banner, "\n")
	m := regexp.MustCompile(`Schema Registry \(embedded\): (http://127\.0\.0\.1:\d+) \(catalogs registry0 point here; register schemas with POST http://127\.0\.0\.1:\d+/subjects/SUBJECT/versions\)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the banner does not name the embedded registry and its catalog:\n%s", text)
	}
	if !strings.Contains(text, "not set, not needed here: ") || !strings.Contains(text, "SCHEMA_REGISTRY_URL") {
		t.Errorf("the banner does not list SCHEMA_REGISTRY_URL among the variables dev did not need:\n%s", text)
	}
	resp, err := http.Get(m[1] + "/subjects")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `["items-value"]` {
		t.Errorf("GET /subjects: %d %s, want the subject --schema registered", resp.StatusCode, body)
	}

	// --schema without a registry catalog is a usage error saying why.
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"dev", "--config", filepath.Join(repoRoot, "examples/http.kafka.crud/config.yaml"), "--schema", "x-value=" + filepath.Join(zillaExamples, "item.avsc")}, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "has no schema-registry catalog, so dev starts no registry") {
		t.Errorf("--schema without a registry catalog: exit %d, %q", code, stderr.String())
	}
}

// The url of each schema-registry catalog is rewritten on its own line,
// whatever the YAML style, so errors keep the user's positions.
func TestPointRegistries(t *testing.T) {
	src := "catalogs:\n" +
		"  a: { type: schema-registry, options: { url: \"http://x:8081\", context: .c } }\n" +
		"  b:\n    type: schema-registry\n    options:\n      url: http://y:8081 # the registry\n" +
		"  c: { type: inline, options: { subjects: { s: { schema: '{}' } } } }\n" +
		"  d: { type: schema-registry, options: { url: '${env:SR}' } }\n"
	urls, err := registryCatalogs([]byte(src))
	if err != nil || len(urls) != 3 {
		t.Fatalf("registry catalogs %v (%v), want a, b and d", urls, err)
	}
	out, replaced := pointRegistries([]byte(src), urls, "http://127.0.0.1:1")
	got := string(out)
	if strings.Join(replaced, " ") != `"http://x:8081" http://y:8081 '${env:SR}'` {
		t.Errorf("replaced %q", replaced)
	}
	want := "catalogs:\n" +
		"  a: { type: schema-registry, options: { url: \"http://127.0.0.1:1\", context: .c } }\n" +
		"  b:\n    type: schema-registry\n    options:\n      url: \"http://127.0.0.1:1\" # the registry\n" +
		"  c: { type: inline, options: { subjects: { s: { schema: '{}' } } } }\n" +
		"  d: { type: schema-registry, options: { url: \"http://127.0.0.1:1\" } }\n"
	if got != want {
		t.Errorf("rewritten:\n%s\nwant:\n%s", got, want)
	}
}
