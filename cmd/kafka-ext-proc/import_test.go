package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/readmetest"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// zillaExamples holds zilla.yaml files written in the shape of Zilla's
// published examples, with the topics, paths and services of ours.
const zillaExamples = repoRoot + "/zillaimport/testdata/examples"

// importZilla runs `import zilla FILE --envoy` and returns the files it
// produced, checked by the loader and the Envoy checks as a user would.
func importZilla(t *testing.T, file string) (cfgPath, envoyPath string) {
	t.Helper()
	dir := t.TempDir()
	cfgPath, envoyPath = filepath.Join(dir, "config.yaml"), filepath.Join(dir, "envoy.yaml")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"import", "zilla", file, "--envoy", envoyPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("import zilla %s: exit %d: %s", file, code, stderr.String())
	}
	if err := os.WriteFile(cfgPath, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The variables a deployment would set.
	env := func(name string) (string, bool) {
		if strings.Contains(name, "REGISTRY") { // a catalog's url
			return "http://value-of-" + strings.ToLower(name), true
		}
		if strings.HasSuffix(name, "_PORT") { // a gRPC service's port
			return "7152", true
		}
		return "value-of-" + name, true
	}
	cfg, err := config.Parse(cfgPath, stdout.Bytes(), env)
	if err != nil {
		t.Fatalf("the imported configuration does not load: %v\n%s", err, stdout.String())
	}
	b, err := envoy.Load(envoyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoy.Validate(b); err != nil {
		t.Fatal(err)
	}
	if err := envoy.Check(b, envoy.CheckOptions{MaxWait: cfg.Limits.MaxWait, ReplyTimeout: cfg.Limits.ReplyTimeout}); err != nil {
		t.Fatal(err)
	}
	return cfgPath, envoyPath
}

// Each of Zilla's examples, imported: the result loads, its Envoy
// configuration passes the checks, and the steps of our example of the same
// name (examples/<name>/README.md) give the outputs shown there when `dev`
// runs the imported configuration behind the imported Envoy configuration,
// started as a user would: no --front, so the emulator listens on the
// imported listener's port (the zilla.yaml's tcp server port, 7114 or 7151).
// The subtests take turns on those ports, so none runs in parallel, and no
// other test of this package starts dev without --front. No environment
// variable is set: dev replaces what they feed (brokers, TLS, SASL).
func TestImportZillaExamples(t *testing.T) {
	for _, c := range []struct{ name, port string }{
		{"http.kafka.crud", "7114"}, {"http.kafka.cache", "7114"}, {"http.kafka.sync", "7114"},
		{"http.kafka.async", "7114"}, {"http.kafka.oneway", "7114"},
		{"grpc.kafka.echo", "7151"}, {"grpc.kafka.fanout", "7151"},
		{"sse.kafka.fanout", "7114"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, envoyFile := importZilla(t, filepath.Join(zillaExamples, c.name+".yaml"))
			playExample(t, c.name, cfg, envoyFile, c.port)
		})
	}
	// http.kafka.sasl.scram: the crud example over a SASL/SCRAM cluster, in
	// Zilla's older options.sasl shape; dev drops TLS and SASL for its
	// embedded broker, and the crud steps run.
	t.Run("http.kafka.sasl.scram", func(t *testing.T) {
		cfg, envoyFile := importZilla(t, filepath.Join(zillaExamples, "http.kafka.sasl.scram.yaml"))
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"security.protocol: SASL_SSL", "sasl.mechanisms: SCRAM-SHA-256", `sasl.username: "${env:SASL_USERNAME}"`} {
			if !bytes.Contains(b, []byte(want)) {
				t.Fatalf("the imported configuration lacks %q:\n%s", want, b)
			}
		}
		playExample(t, "http.kafka.crud", cfg, envoyFile, "7114")
	})
	// grpc.kafka.proxy: the kafka-grpc binding and its client chain become
	// our kafka-grpc binding, the service's address from the variables
	// Zilla's example reads; with them set to the Echo service's address,
	// our example's steps run on the imported configuration (the service
	// answering, not a responder).
	t.Run("grpc.kafka.proxy", func(t *testing.T) {
		cfg, envoyFile := importZilla(t, filepath.Join(zillaExamples, "grpc.kafka.proxy.yaml"))
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"type: kafka-grpc", `authority: "${env:ECHO_SERVER_HOST}:${env:ECHO_SERVER_PORT}"`, "correlation-id: zilla:correlation-id"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Fatalf("the imported configuration lacks %q:\n%s", want, b)
			}
		}
		t.Setenv("ECHO_SERVER_HOST", "127.0.0.1")
		t.Setenv("ECHO_SERVER_PORT", "7152")
		playExample(t, "grpc.kafka.proxy", cfg, envoyFile, "7151")
	})
	// Zilla's examples of topic models: Avro in a registry (Karapace, here
	// dev's embedded registry), Protobuf from a filesystem catalog.
	for _, name := range []string{"http.kafka.karapace", "http.kafka.proto.json", "http.kafka.json.schema"} {
		t.Run(name, func(t *testing.T) { playImported(t, name, "7114") })
	}
}

// playExample runs examples/<name>/README.md's steps against dev started
// with cfg and envoyFile instead of the example's own configuration.
func playExample(t *testing.T, name, cfg, envoyFile, port string) {
	t.Helper()
	playSteps(t, filepath.Join(repoRoot, "examples", name, "README.md"), port, func(t *testing.T, args []string) []string {
		args = exampleDevArgs(t, name, args)
		for i, a := range args {
			if strings.HasPrefix(a, "--config=") {
				args[i] = "--config=" + cfg
			}
		}
		return append(args, "--envoy="+envoyFile)
	})
}

// playSteps runs a README's steps against dev started with the arguments
// devArgs makes of the README's, and without --front: the emulator must
// come up on 127.0.0.1:port, the imported listener's port. The README's
// commands name that port or dev's default front (127.0.0.1:8080, which
// the runner sends to the front dev names).
func playSteps(t *testing.T, readme, port string, devArgs func(t *testing.T, args []string) []string) {
	t.Helper()
	want := net.JoinHostPort("127.0.0.1", port)
	// A port another process holds would make dev fail to start; say which
	// and why rather than let the steps fail for no visible reason.
	l, err := net.Listen("tcp", want)
	if err != nil {
		t.Fatalf("port %s, the imported Envoy listener's, is not free on this machine (%v): this test plays the example on it as a user would; stop what holds it", port, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := readmetest.Parse(string(b), "## Steps")
	if err != nil {
		t.Fatal(err)
	}
	readmetest.Run(t, steps, readmetest.Env{Root: repoRoot, Program: exampleProgram, Start: func(t *testing.T, args []string) (string, string) {
		args = devArgs(t, args)
		if i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--front") }); i >= 0 {
			t.Fatalf("%s starts dev with %s: an imported configuration is played on its own listener's port", readme, args[i])
		}
		front, kafkaAddr, _, _ := devStartBase(t, withoutFront(devBaseArgs(args)), args...)
		if front != want {
			t.Fatalf("dev without --front listens on %s, want %s (the imported listener's port)", front, want)
		}
		return front, kafkaAddr
	}})
}

// playImported runs the steps written beside an example input (the input's
// name with "steps" and Markdown for "yaml", such as the karapace example's) for its
// imported configuration: they start dev with
// `--config config.yaml --envoy envoy.yaml`, the files the import wrote,
// and the embedded Schema Registry on its default address, 127.0.0.1:8081
// (the port a registry's commands name), which must be free.
func playImported(t *testing.T, name, port string) {
	abs, err := filepath.Abs(filepath.Join(zillaExamples, name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Absolute: the schema files of filesystem catalogs are found from the
	// temporary directory the import is saved in.
	cfg, envoyFile := importZilla(t, abs)
	playSteps(t, filepath.Join(zillaExamples, name+".steps.md"), port, func(t *testing.T, args []string) []string {
		want := []string{"dev", "--config", "config.yaml", "--envoy", "envoy.yaml"}
		if len(args) < len(want) || !slices.Equal(args[:len(want)], want) {
			t.Fatalf("the steps start dev with %q, want %q first", args, want)
		}
		var more []string
		for _, a := range args[len(want):] {
			// --schema SUBJECT=FILE, the file relative to the repository.
			subject, file, ok := strings.Cut(strings.TrimPrefix(a, "--schema="), "=")
			switch {
			case a == "--schema":
				more = append(more, a)
			case ok:
				more = append(more, subject+"="+filepath.Join(repoRoot, file))
			default:
				t.Fatalf("the steps start dev with %q: the test knows --schema SUBJECT=FILE only", a)
			}
		}
		if l, err := net.Listen("tcp", "127.0.0.1:8081"); err != nil {
			t.Fatalf("port 8081, the embedded Schema Registry's default, is not free on this machine (%v): the steps register schemas there as a user would; stop what holds it", err)
		} else if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return append([]string{"--config=" + cfg, "--envoy=" + envoyFile}, more...)
	})
}

// dev runs an imported configuration written for a secured cluster (TLS
// with a JKS trust store, SASL/SCRAM from environment variables that are not
// set) against its plaintext embedded broker, and its banner says what it
// dropped.
func TestDevDropsKafkaSecurity(t *testing.T) {
	cfg, _ := importZilla(t, filepath.Join(zillaExamples, "http.kafka.oneway.yaml"))
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"security.protocol: SASL_SSL", "sasl.username: \"${env:SASL_USERNAME}\"", "ssl.ca.location: tls/kafka.truststore.pem"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Fatalf("the imported configuration lacks %q:\n%s", want, b)
		}
	}
	_, _, banner, _ := devStart(t, "--config", cfg)
	want := "kafka brokers: TLS and SASL dropped for the embedded broker (sasl.mechanisms, sasl.password, sasl.username, security.protocol, ssl.ca.location)"
	if !slices.ContainsFunc(banner, func(l string) bool { return strings.TrimSpace(l) == want }) {
		t.Errorf("the banner does not say %q:\n%s", want, strings.Join(banner, "\n"))
	}
	if !slices.ContainsFunc(banner, func(l string) bool {
		return strings.Contains(l, "not set, not needed here: KAFKA_BOOTSTRAP_SERVER, SASL_USERNAME, SASL_PASSWORD")
	}) {
		t.Errorf("the banner does not list the unset variables:\n%s", strings.Join(banner, "\n"))
	}
}

// An unset variable that dev does not replace is still an error.
func TestDevRefusesUnsetEnvItDoesNotReplace(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	src := "bindings:\n  k: { type: kafka, kind: client, options: { bootstrap.servers: \"${env:KAFKA_EXT_PROC_TEST_UNSET_A}\" } }\n" +
		"  h:\n    type: http-kafka\n    kind: proxy\n    routes:\n      - exit: k\n        with: { capability: produce, topic: \"${env:KAFKA_EXT_PROC_TEST_UNSET_B}\" }\n"
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"dev", "--config", cfg, "--front", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--kafka", "127.0.0.1:0", "--admin", ""}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "environment variable KAFKA_EXT_PROC_TEST_UNSET_B is not set") {
		t.Fatalf("exit %d, stderr %q; want 1 and the unset topic variable named", code, stderr.String())
	}
}

// The command's usage: the file before or after --envoy; anything else is a
// usage error (exit 2).
func TestImportUsage(t *testing.T) {
	file := filepath.Join(zillaExamples, "http.kafka.crud.yaml")
	envoyFile := filepath.Join(t.TempDir(), "envoy.yaml")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"import", "zilla", file}, 0},
		{[]string{"import", "zilla", "--envoy", envoyFile, file}, 0},
		{[]string{"import", "zilla", file, "--envoy", envoyFile}, 0},
		{[]string{"import"}, 2},
		{[]string{"import", "zilla"}, 2},
		{[]string{"import", "nginx", file}, 2},
		{[]string{"import", "zilla", file, "extra"}, 2},
		{[]string{"import", "zilla", file, "--bogus"}, 2},
		{[]string{"import", "zilla", "no-such-file.yaml"}, 1},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr); code != c.code {
			t.Errorf("%q: exit %d, want %d (%s)", c.args, code, c.code, stderr.String())
		}
		if c.code == 0 && !bytes.Contains(stdout.Bytes(), []byte("type: http-kafka")) {
			t.Errorf("%q printed no configuration", c.args)
		}
	}
}

// The imported grpc.kafka.echo keeps Zilla's access-control: under dev, as
// under Envoy, a browser's preflight of a gRPC method is answered by the CORS
// filter (200 with access-control-*, nothing reaches the processor), and a
// gRPC call from an allowed origin carries access-control-allow-origin. A
// gRPC-Web request is not translated (the imported Envoy file has no
// grpc_web filter, and dev emulates none): it reaches the processor as a
// plain HTTP request, answered 415 saying what gRPC-Web needs.
func TestImportedGRPCListenerAnswersCORS(t *testing.T) {
	cfg, envoyFile := importZilla(t, filepath.Join(zillaExamples, "grpc.kafka.echo.yaml"))
	front, _ := devRun(t, "--config", cfg, "--envoy", envoyFile, "--responder", "grpc-echo:echo-requests")
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Protocols: &protos}}
	do := func(method, ctype string, body []byte, hs ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+front+"/example.Echo/EchoUnary", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("content-type", ctype)
		}
		for i := 0; i+1 < len(hs); i += 2 {
			req.Header.Set(hs[i], hs[i+1])
		}
		resp, err := h2c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	const origin = "https://app.example.com"
	pre := do("OPTIONS", "", nil, "origin", origin, "access-control-request-method", "POST", "access-control-request-headers", "content-type,x-grpc-web")
	if pre.StatusCode != 200 || pre.Header.Get("access-control-allow-origin") != origin || pre.Header.Get("access-control-allow-methods") != "POST" {
		t.Errorf("preflight: %d %v, want 200 from Envoy's CORS filter", pre.StatusCode, pre.Header)
	}
	frame := []byte{0, 0, 0, 0, 2, 0x0a, 0}
	call := do("POST", "application/grpc", frame, "te", "trailers", "origin", origin)
	if call.StatusCode != 200 || call.Trailer.Get("grpc-status") != "0" || call.Header.Get("access-control-allow-origin") != origin {
		t.Errorf("gRPC call from %s: %d %v %v, want OK with access-control-allow-origin", origin, call.StatusCode, call.Header, call.Trailer)
	}
	web := do("POST", "application/grpc-web+proto", frame, "x-grpc-web", "1", "origin", origin)
	if web.StatusCode != http.StatusUnsupportedMediaType || web.Header.Get("content-type") != "application/problem+json" || web.Header.Get("grpc-status") != "" {
		t.Errorf("gRPC-Web request: %d %v, want 415 problem+json (no grpc_web filter)", web.StatusCode, web.Header)
	}
}
