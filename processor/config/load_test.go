package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testEnv is the environment the valid test configs are loaded with.
func testEnv(name string) (string, bool) {
	v, ok := map[string]string{
		"KAFKA_BOOTSTRAP": "broker:9093",
		"KAFKA_PASSWORD":  "s3cr3t",
		"TOPIC_PREFIX":    "acme",
		"JWKS":            `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
		"MAX_BODY":        "512KiB",
		"REPLY_TIMEOUT":   "12s",
	}[name]
	return v, ok
}

func loadValid(t *testing.T, name string) *Config {
	t.Helper()
	file := filepath.Join("testdata", "valid", name)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(file, data, testEnv)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return cfg
}

func tmpl(parts ...TemplatePart) Template {
	t := Template{Parts: parts}
	t.Raw = t.String()
	return t
}

func lit(s string) TemplatePart      { return TemplatePart{Literal: s} }
func param(name string) TemplatePart { return TemplatePart{Ref: RefParam, Name: name} }
func identity(g string) TemplatePart { return TemplatePart{Ref: RefGuardIdentity, Name: g} }
func ptr[T any](v T) *T              { return &v }
func mustPath(t *testing.T, raw string) *PathTemplate {
	t.Helper()
	p, err := ParsePathTemplate(raw)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	idemKey = TemplatePart{Ref: RefIdempotencyKey}
	corrID  = TemplatePart{Ref: RefCorrelationID}
)

// TestFullConfig loads a file using every field of both proxy bindings and
// checks each landed in the model.
func TestFullConfig(t *testing.T) {
	cfg := loadValid(t, "full.yaml")
	at := fullAt

	if got, want := cfg.Kafka["kafka0"], (&KafkaCluster{Name: "kafka0", Pos: at(4, 3), Properties: map[string]string{
		"bootstrap.servers": "localhost:9092", "security.protocol": "PLAINTEXT", "linger.ms": "1",
		"enable.idempotence": "true", "retry.backoff.ms": "100",
	}, PropertyPos: map[string]Pos{
		"bootstrap.servers": at(8, 26), "security.protocol": at(9, 26), "linger.ms": at(10, 18),
		"enable.idempotence": at(11, 27), "retry.backoff.ms": at(12, 25),
	}}); !reflect.DeepEqual(got, want) {
		t.Errorf("kafka0 = %+v, want %+v", got, want)
	}
	if len(cfg.Bindings) != 3 {
		t.Fatalf("bindings = %d, want 3", len(cfg.Bindings))
	}
	checkFullHTTP(t, cfg.Bindings[0])
	checkFullGRPC(t, cfg.Bindings[1])
	checkFullSSE(t, cfg.Bindings[2])
	checkFullGuardsAndLimits(t, cfg)
}

// checkFullSSE checks the sse-kafka binding of full.yaml.
func checkFullSSE(t *testing.T, sse *Binding) {
	t.Helper()
	checkEqual(t, "sse0 type", sse.Type, SSEKafka)
	checkEqual(t, "sse0 options", *sse.SSE, SSEOptions{CredentialsQuery: "access_token", CredentialsCookie: "session"})
	if len(sse.Routes) != 1 {
		t.Fatalf("sse0 routes = %d, want 1", len(sse.Routes))
	}
	r := sse.Routes[0]
	checkEqual(t, "sse0 guarded", r.Guarded, []GuardRequirement{{Guard: "jwt0", Roles: []string{"read:items"}}})
	checkEqual(t, "sse0 path", r.When[0].Path.Raw, "/events/{tenant}")
	w := r.With
	checkEqual(t, "sse0 capability", w.Capability, Fetch)
	checkEqual(t, "sse0 topic", w.Topic.Raw, "events-${params.tenant}")
	checkEqual(t, "sse0 topic-pattern", w.TopicPattern, "events-*")
	checkEqual(t, "sse0 event id", w.EventID, EventIDPosition)
	if len(w.Filters) != 1 || w.Filters[0].Key == nil || w.Filters[0].Key.Raw != "${params.tenant}" || len(w.Filters[0].Headers) != 1 {
		t.Errorf("sse0 filters = %+v", w.Filters)
	}
}

// fullAt is a position in testdata/valid/full.yaml.
func fullAt(line, col int) Pos {
	return Pos{File: filepath.Join("testdata", "valid", "full.yaml"), Line: line, Col: col}
}

func checkEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s =\n  %#v\nwant\n  %#v", what, got, want)
	}
}

// checkFullHTTP checks the http-kafka binding of full.yaml.
func checkFullHTTP(t *testing.T, http *Binding) {
	t.Helper()
	at, check := fullAt, func(what string, got, want any) { t.Helper(); checkEqual(t, what, got, want) }
	check("http0 header", [3]any{http.Name, http.Type, http.Pos}, [3]any{"http0", HTTPKafka, at(13, 3)})
	check("http0 options", *http.HTTP, HTTPOptions{
		IdempotencyHeader: "idempotency-key", // lower-cased
		Correlation:       CorrelationHeaders{ReplyTo: "gateway:reply-to", CorrelationID: "gateway:correlation-id"},
	})
	if len(http.Routes) != 6 {
		t.Fatalf("http0 routes = %d, want 6", len(http.Routes))
	}

	// Shape 1: correlated request-response with the follow-up condition.
	r := http.Routes[0]
	check("route 0 guarded", r.Guarded, []GuardRequirement{{Guard: "jwt0", Roles: []string{"write:items"}}})
	check("route 0 when", []Condition{{Method: r.When[0].Method, Path: r.When[0].Path}, {Method: r.When[1].Method, Path: r.When[1].Path}},
		[]Condition{{Method: "PUT", Path: mustPath(t, "/items/{id}")}, {Method: "GET", Path: mustPath(t, "/items/{id};cid={correlationId}")}})
	check("route 0 follow-up parts", r.When[1].Path.Parts, []PathPart{{Literal: "/items/"}, {Param: "id"}, {Literal: ";cid="}, {Param: "correlationId"}})
	check("route 0 exit", r.Exit, "kafka0")
	check("route 0 with", *r.With, With{
		Capability: Produce, Topic: tmpl(lit("items-requests")), Acks: AcksLeaderOnly,
		Key: ptr(tmpl(param("id"))),
		Overrides: []HeaderTemplate{
			{Name: "x-owner", Value: tmpl(identity("jwt0"))},
			{Name: "x-item", Value: tmpl(param("id"))},
		},
		ReplyTo: "items-responses",
		Async:   []HeaderTemplate{{Name: "location", Value: tmpl(lit("/items/"), param("id"), lit(";cid="), corrID)}},
		Pos:     at(34, 11),
	})

	// Shape 2: single-topic CRUD.
	check("route 1 with", *http.Routes[1].With, With{Capability: Produce, Topic: tmpl(lit("items-snapshots")),
		Acks: AcksInSyncReplicas, Key: ptr(tmpl(idemKey)), Pos: at(47, 15)})
	check("route 2 merge", *http.Routes[2].With.Merge, Merge{ContentType: "application/json", PatchInitial: "[]", PatchPath: "/-"})
	check("route 3 filters", http.Routes[3].With.Filters, []Filter{{Key: ptr(tmpl(param("id")))}})
	check("route 4 any method", [2]any{http.Routes[4].When[0].Method, http.Routes[4].With.Acks}, [2]any{"", AcksNone})
	check("route 5 topic", [2]any{http.Routes[5].With.Topic, http.Routes[5].With.TopicPattern}, [2]any{tmpl(lit("tenant-"), param("tenant")), "tenant-*"})
	check("route 5 filters", http.Routes[5].With.Filters, []Filter{
		{Key: ptr(tmpl(param("id"))), Headers: []HeaderTemplate{{Name: "owner", Value: tmpl(identity("jwt0"))}}},
		{Headers: []HeaderTemplate{{Name: "alias", Value: tmpl(param("id"))}}},
	})
	check("route 5 guarded", http.Routes[5].Guarded, []GuardRequirement{{Guard: "jwt0", Roles: []string{}}})

}

// checkFullGRPC checks the grpc-kafka binding of full.yaml.
func checkFullGRPC(t *testing.T, grpc *Binding) {
	t.Helper()
	at, check := fullAt, func(what string, got, want any) { t.Helper(); checkEqual(t, what, got, want) }
	check("grpc0 options", *grpc.GRPC, GRPCOptions{
		IdempotencyMetadata: "idempotency-key", ReliabilityField: 32767, ReliabilityMetadata: "last-message-id",
		Correlation: CorrelationHeaders{ReplyTo: "gateway:reply-to", CorrelationID: "gateway:correlation-id",
			Service: "gateway:service", Method: "gateway:method", Status: "gateway:status", Message: "gateway:message"},
	})
	g := grpc.Routes
	check("grpc route 0 when", g[0].When, []Condition{{GRPCMethod: "example.v1.Items/Watch", Metadata: []MetadataMatch{
		{Name: "custom", Value: []byte("test")}, {Name: "trace-bin", Value: []byte{1, 2, 3}, Binary: true},
	}, Pos: at(89, 13)}})
	check("grpc route 0 with", *g[0].With, With{Capability: Fetch, Topic: tmpl(lit("items-snapshots")),
		Filters: []Filter{{Key: ptr(tmpl(lit("fixed"))), Headers: []HeaderTemplate{{Name: "kind", Value: tmpl(lit("item"))}}}}, Pos: at(95, 11)})
	check("grpc route 1", [3]any{g[1].Guarded, g[1].When[0].Service, *g[1].With}, [3]any{
		[]GuardRequirement{{Guard: "ejwt", Roles: []string{"admin"}}}, "example.v1.Commands",
		With{Capability: Produce, Topic: tmpl(lit("commands")), Acks: AcksInSyncReplicas, Key: ptr(tmpl(idemKey)),
			Overrides: []HeaderTemplate{{Name: "origin", Value: tmpl(lit("grpc"))}}, ReplyTo: "command-replies", Pos: at(102, 11)},
	})
	check("grpc route 2 method", g[2].When[0].GRPCMethod, "example.v1.Events/*")
}

// checkFullGuardsAndLimits checks the guards and limits of full.yaml.
func checkFullGuardsAndLimits(t *testing.T, cfg *Config) {
	t.Helper()
	check := func(what string, got, want any) { t.Helper(); checkEqual(t, what, got, want) }
	jwks, err := os.ReadFile(filepath.Join("testdata", "valid", "jwks.json"))
	if err != nil {
		t.Fatal(err)
	}
	check("jwt0", *cfg.Guards["jwt0"].JWT, JWTOptions{
		Issuer: "https://auth.example.com", Audience: "https://api.example.com", Keys: jwks,
		Algorithms: []string{"RS256", "ES256"}, RolesClaim: "scope", IdentityClaim: "sub", Skew: 45 * time.Second,
	})
	check("ejwt", [2]any{cfg.Guards["ejwt"].Type, *cfg.Guards["ejwt"].JWT}, [2]any{"envoy-jwt",
		JWTOptions{Provider: "auth0", RolesClaim: "permissions", IdentityClaim: "email"}})
	check("limits", cfg.Limits, Limits{
		MaxBody: 2 << 20, MaxWait: 90 * time.Second, ReplyTimeout: 20 * time.Second, ReplyRetention: 15 * time.Minute,
		KafkaTimeout: 4 * time.Second, MaxViewBytes: 512 << 20, ReplyIndexBytes: 32 << 20, MaxViews: 500,
		ViewIdle: 5 * time.Minute, StreamLagBudget: 2000, StreamSendInterval: 0, StreamSendRate: 5000,
		IdempotencyWindow: 20 * time.Minute, IdempotencyKeys: 5000, SSEHeartbeat: 10 * time.Second, SSERetry: 3 * time.Second,
	})
}

func TestDefaults(t *testing.T) {
	cfg, err := Parse("d.yaml", []byte(`
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "k:9092" } }
  http0: { type: http-kafka, kind: proxy, routes: [{ exit: kafka0, with: { capability: produce, topic: t } }] }
  grpc0: { type: grpc-kafka, kind: proxy }
guards:
  jwt0: { type: jwt, options: { keys: [{ kty: EC }] } }
  e: { type: envoy-jwt, options: { provider: p } }
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits != DefaultLimits() {
		t.Errorf("limits = %+v", cfg.Limits)
	}
	want := Limits{MaxBody: 1 << 20, MaxWait: time.Minute, ReplyTimeout: 30 * time.Second, ReplyRetention: 10 * time.Minute,
		KafkaTimeout: 5 * time.Second, MaxViewBytes: 256 << 20, ReplyIndexBytes: 64 << 20, MaxViews: 1000,
		ViewIdle: 10 * time.Minute, StreamLagBudget: 10000, StreamSendInterval: 50 * time.Millisecond,
		StreamSendRate: 20000, IdempotencyWindow: 10 * time.Minute, IdempotencyKeys: 1_000_000,
		SSEHeartbeat: 15 * time.Second, SSERetry: 2 * time.Second}
	if DefaultLimits() != want {
		t.Errorf("DefaultLimits() = %+v, want %+v", DefaultLimits(), want)
	}
	if got, want := *cfg.Bindings[0].HTTP, (HTTPOptions{IdempotencyHeader: "idempotency-key",
		Correlation: CorrelationHeaders{ReplyTo: "gateway:reply-to", CorrelationID: "gateway:correlation-id"}}); got != want {
		t.Errorf("http options = %+v", got)
	}
	if got, want := *cfg.Bindings[1].GRPC, (GRPCOptions{IdempotencyMetadata: "idempotency-key", ReliabilityField: 32767,
		ReliabilityMetadata: "last-message-id", Correlation: CorrelationHeaders{ReplyTo: "gateway:reply-to",
			CorrelationID: "gateway:correlation-id", Service: "gateway:service", Method: "gateway:method",
			Status: "gateway:status", Message: "gateway:message"}}); got != want {
		t.Errorf("grpc options = %+v", got)
	}
	if w := cfg.Bindings[0].Routes[0].With; w.Acks != AcksInSyncReplicas || w.Key != nil {
		t.Errorf("with = %+v", w)
	}
	j := cfg.Guards["jwt0"].JWT
	if j.RolesClaim != "scope" || j.IdentityClaim != "sub" || j.Skew != 30*time.Second ||
		!reflect.DeepEqual(j.Algorithms, DefaultAlgorithms()) || string(j.Keys) != `{"keys":[{"kty":"EC"}]}` {
		t.Errorf("jwt0 = %+v", j)
	}
	if e := cfg.Guards["e"].JWT; e.RolesClaim != "scope" || e.IdentityClaim != "sub" || e.Provider != "p" {
		t.Errorf("e = %+v", e)
	}
	// A binding without routes is kept, with its options defaulted.
	if len(cfg.Bindings[1].Routes) != 0 {
		t.Errorf("grpc0 routes = %v", cfg.Bindings[1].Routes)
	}
}

func TestEnvResolution(t *testing.T) {
	cfg := loadValid(t, "env.yaml")
	k := cfg.Kafka["kafka0"].Properties
	if k["bootstrap.servers"] != "broker:9093" || k["sasl.password"] != "s3cr3t" {
		t.Errorf("properties = %v", k)
	}
	w := cfg.Bindings[0].Routes[0].With
	// Environment values become literal text of the template.
	if want := tmpl(lit("acme-items-"), identity("jwt0")); !reflect.DeepEqual(w.Topic, want) {
		t.Errorf("topic = %#v, want %#v", w.Topic, want)
	}
	if w.TopicPattern != "acme-items-*" {
		t.Errorf("topic-pattern = %q", w.TopicPattern)
	}
	if string(cfg.Guards["jwt0"].JWT.Keys) != `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}` {
		t.Errorf("keys = %s", cfg.Guards["jwt0"].JWT.Keys)
	}
	if cfg.Limits.MaxBody != 512<<10 || cfg.Limits.ReplyTimeout != 12*time.Second {
		t.Errorf("limits = %+v", cfg.Limits)
	}

	// A value from the environment is never parsed as a template.
	cfg, err := Parse("e.yaml", []byte(k0+`  http0: {type: http-kafka, kind: proxy, routes: [{exit: kafka0, with: {capability: produce, topic: t, key: "k-${env:K}"}}]}`),
		func(string) (string, bool) { return "${params.x}", true })
	if err != nil {
		t.Fatal(err)
	}
	if key := cfg.Bindings[0].Routes[0].With.Key; !key.Static() || key.Raw != "k-${params.x}" {
		t.Errorf("key = %#v", key)
	}

	// Every unset variable is reported, each at its own value.
	_, err = Parse("e.yaml", []byte("bindings:\n  kafka0:\n    type: kafka\n    kind: client\n    options:\n      bootstrap.servers: ${env:A}\n      sasl.password: x${env:B}\n"), nil)
	wantErr := "e.yaml:6:26: environment variable A is not set (referenced by ${env:A} in bootstrap.servers)\n" +
		"e.yaml:7:22: environment variable B is not set (referenced by ${env:B} in sasl.password)"
	if err == nil || err.Error() != wantErr {
		t.Errorf("err = %v, want\n%s", err, wantErr)
	}
}

func TestFileReferences(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "password"), []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	jwks := `{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`
	if err := os.WriteFile(filepath.Join(dir, "keys", "jwks.json"), []byte(jwks), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "config.yaml")
	data := "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: k, sasl.password: \"${file:password}\"}}\n" +
		"guards:\n  jwt0: {type: jwt, options: {keys-file: keys/jwks.json}}\n"
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	// Relative paths resolve against the config file's directory, not the working directory.
	cfg, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Kafka["kafka0"].Properties["sasl.password"]; got != "hunter2" {
		t.Errorf("sasl.password = %q (one final newline dropped)", got)
	}
	if got := string(cfg.Guards["jwt0"].JWT.Keys); got != jwks {
		t.Errorf("keys = %s", got)
	}
	if cfg.Source != file {
		t.Errorf("source = %q", cfg.Source)
	}

	// keys-file holding something else than a JWKS.
	if err := os.WriteFile(filepath.Join(dir, "keys", "jwks.json"), []byte(`{"kty":"RSA"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(file)
	if want := file + `:4:42: keys-file keys/jwks.json: the JWKS has no keys: expected {"keys": [{"kty": ...}, ...]}`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || errors.As(err, new(Errors)) {
		t.Errorf("missing file: err = %v, want a plain error", err)
	}
}

func TestAliases(t *testing.T) {
	cfg, err := Parse("a.yaml", []byte(k0+`  http0:
    type: http-kafka
    kind: proxy
    routes:
      - exit: kafka0
        guarded: &readers { jwt0: [read] }
        when: [{ method: GET, path: "/items/{id}" }]
        with: &byId { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - exit: kafka0
        guarded: *readers
        when: [{ method: HEAD, path: "/items/{id}" }]
        with: *byId
guards:
  jwt0: { type: envoy-jwt, options: { provider: !!str 123 } }
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Bindings[0].Routes
	if !reflect.DeepEqual(r[0].With.Filters, r[1].With.Filters) || !reflect.DeepEqual(r[0].Guarded, r[1].Guarded) {
		t.Errorf("aliased routes differ: %+v %+v", r[0], r[1])
	}
	if p := cfg.Guards["jwt0"].JWT.Provider; p != "123" {
		t.Errorf("!!str provider = %q", p)
	}

	// A circular alias in inline keys is reported, not followed forever.
	_, err = Parse("a.yaml", []byte(k0+"guards:\n  jwt0: {type: jwt, options: {keys: &k [{kty: EC, x: *k}]}}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "a.yaml:4:") || !strings.Contains(err.Error(), "too deeply nested") {
		t.Errorf("err = %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{in: "0", want: 0},
		{in: "1024", want: 1024},
		{in: "1B", want: 1},
		{in: "512KiB", want: 512 << 10},
		{in: "1MiB", want: 1 << 20},
		{in: "1 MiB", want: 1 << 20},
		{in: "1.5KiB", want: 1536},
		{in: "2GiB", want: 2 << 30},
		{in: "1TiB", want: 1 << 40},
		{in: "1KB", want: 1000},
		{in: "1.1GB", want: 1_100_000_000},
		{in: "256MB", want: 256_000_000},
		{in: "1.5B", err: `invalid size "1.5B": it is not a whole number of bytes`},
		{in: "1mib", err: `invalid size "1mib": use a number of bytes or a number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 512KiB, 1MiB)`},
		{in: "-1", err: `invalid size "-1": use a number of bytes or a number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 512KiB, 1MiB)`},
		{in: "", err: `invalid size "": use a number of bytes or a number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 512KiB, 1MiB)`},
		{in: "9999999TiB", err: `invalid size "9999999TiB": too large`},
	} {
		got, err := ParseSize(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParseSize(%q) error = %v, want %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, n := range []int64{1, 1000, 1024, 1536, 1 << 20, 3 << 30, 5 << 40} {
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, got, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "30s", want: 30 * time.Second},
		{in: "1m30s", want: 90 * time.Second},
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "10m", want: 10 * time.Minute},
		{in: "1.5h", want: 90 * time.Minute},
		{in: "30", err: `invalid duration "30": add a unit: ms, s, m or h (e.g. 30s)`},
		{in: "1d", err: `invalid duration "1d": use a number with a unit: ms, s, m or h (e.g. 30s, 1m30s)`},
	} {
		got, err := ParseDuration(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParseDuration(%q) error = %v, want %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestLexTemplate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []rawPart
		err  string
	}{
		{in: "", want: nil},
		{in: "plain $ and } and {", want: []rawPart{{Literal: "plain $ and } and {"}}},
		{in: "${params.id}", want: []rawPart{{Ref: &rawRef{Kind: RefParam, Name: "id", Text: "${params.id}"}}}},
		{in: "/items/${params.id};cid=${correlationId}", want: []rawPart{
			{Literal: "/items/"}, {Ref: &rawRef{Kind: RefParam, Name: "id", Text: "${params.id}"}},
			{Literal: ";cid="}, {Ref: &rawRef{Kind: RefCorrelationID, Text: "${correlationId}"}},
		}},
		{in: "${idempotencyKey}", want: []rawPart{{Ref: &rawRef{Kind: RefIdempotencyKey, Text: "${idempotencyKey}"}}}},
		{in: "u-${guarded['jwt0'].identity}", want: []rawPart{{Literal: "u-"}, {Ref: &rawRef{Kind: RefGuardIdentity, Name: "jwt0", Text: "${guarded['jwt0'].identity}"}}}},
		{in: "${env:HOME_1}", want: []rawPart{{Ref: &rawRef{Kind: refEnv, Name: "HOME_1", Text: "${env:HOME_1}"}}}},
		{in: "${file:/run/secrets/x}", want: []rawPart{{Ref: &rawRef{Kind: refFile, Name: "/run/secrets/x", Text: "${file:/run/secrets/x}"}}}},
		{in: "$${params.x}", want: []rawPart{{Literal: "$"}, {Ref: &rawRef{Kind: RefParam, Name: "x", Text: "${params.x}"}}}},
		{in: "a${", err: `unterminated "${" in "a${": close the reference with "}"`},
		{in: "${}", err: `unknown reference ${}: ` + refHelp},
		{in: "${params.}", err: `bad parameter name in ${params.}: a name is letters, digits and '_', not starting with a digit`},
		{in: "${env:1X}", err: `bad environment variable name in ${env:1X}: a name is letters, digits and '_', not starting with a digit`},
		{in: "${file:}", err: `empty path in ${file:}: write ${file:<path>}`},
		{in: "${guarded['g'].attributes.x}", err: `malformed reference ${guarded['g'].attributes.x}: write ${guarded['<guard>'].identity}`},
		{in: "${guarded[''].identity}", err: `malformed reference ${guarded[''].identity}: write ${guarded['<guard>'].identity}`},
	} {
		got, err := lexTemplate(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("lexTemplate(%q) error = %v, want %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("lexTemplate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestTemplateExpand(t *testing.T) {
	tp := tmpl(lit("/items/"), param("id"), lit(";cid="), corrID)
	got := tp.Expand(func(p TemplatePart) string {
		if p.Ref == RefParam {
			return "42"
		}
		return "c-1"
	})
	if got != "/items/42;cid=c-1" {
		t.Errorf("Expand = %q", got)
	}
	if tp.String() != "/items/${params.id};cid=${correlationId}" || tp.Static() || !tp.HasRef(RefCorrelationID) || len(tp.Refs()) != 2 {
		t.Errorf("template = %#v", tp)
	}
}

func TestParsePathTemplate(t *testing.T) {
	for _, tc := range []struct {
		in     string
		parts  []PathPart
		params []string
	}{
		{"/", []PathPart{{Literal: "/"}}, nil},
		{"/items", []PathPart{{Literal: "/items"}}, nil},
		{"/items/{id}", []PathPart{{Literal: "/items/"}, {Param: "id"}}, []string{"id"}},
		{"/items/{id};cid={correlationId}", []PathPart{{Literal: "/items/"}, {Param: "id"}, {Literal: ";cid="}, {Param: "correlationId"}}, []string{"id", "correlationId"}},
		{"/v1/item-{id}.json", []PathPart{{Literal: "/v1/item-"}, {Param: "id"}, {Literal: ".json"}}, []string{"id"}},
		{"/a/{x}/b/{y}/", []PathPart{{Literal: "/a/"}, {Param: "x"}, {Literal: "/b/"}, {Param: "y"}, {Literal: "/"}}, []string{"x", "y"}},
	} {
		p, err := ParsePathTemplate(tc.in)
		if err != nil {
			t.Errorf("ParsePathTemplate(%q): %v", tc.in, err)
			continue
		}
		if p.Raw != tc.in || !reflect.DeepEqual(p.Parts, tc.parts) || !reflect.DeepEqual(p.Params, tc.params) {
			t.Errorf("ParsePathTemplate(%q) = %+v", tc.in, p)
		}
	}
	for _, bad := range []string{"", "items", "/a/{", "/a/}", "/a/{}", "/a/{b{c}}", "/a/{1}", "/a/{x}{y}", "/a/{x}/{x}", "/a?b", "/a#b", "/a/*", "/a b", "/a\x00"} {
		if _, err := ParsePathTemplate(bad); err == nil {
			t.Errorf("ParsePathTemplate(%q) accepted", bad)
		}
	}
}
