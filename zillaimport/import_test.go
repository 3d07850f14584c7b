package zillaimport

import (
	"bytes"
	"encoding/base64"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

var update = flag.Bool("update", false, "rewrite the golden files of the examples' imports")

func importFile(t *testing.T, path string) *Result {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(path, src)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func load(t *testing.T, res *Result) *config.Config {
	t.Helper()
	cfg, err := config.Parse("imported.yaml", res.Config, func(name string) (string, bool) {
		if strings.Contains(name, "REGISTRY") { // a catalog's url
			return "http://env-" + strings.ToLower(name), true
		}
		if strings.HasSuffix(name, "_PORT") { // a gRPC service's port
			return "50051", true
		}
		return "env-" + name, true
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Config)
	}
	return cfg
}

// refusedExamples are the inputs the importer refuses (TestRefusedExamples
// says where and why).
var refusedExamples = map[string]bool{
	"http.kafka.avro.json.yaml": true, "http.kafka.avro.json.headers.yaml": true,
}

// The imports of the examples are kept as golden files (docs/from-zilla.md
// shows them); go test ./zillaimport -update rewrites them.
func TestExamplesGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".imported.yaml") || strings.HasSuffix(f, ".envoy.yaml") || refusedExamples[filepath.Base(f)] {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			res := importFile(t, f)
			load(t, res)
			for suffix, got := range map[string][]byte{".imported.yaml": res.Config, ".envoy.yaml": res.Envoy} {
				golden := strings.TrimSuffix(f, ".yaml") + suffix
				if *update {
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from the import (go test ./zillaimport -update):\n%s", golden, got)
				}
			}
		})
	}
}

// Every field of Zilla's http-kafka and grpc-kafka binding schemas that has a
// counterpart arrives in the loaded configuration with its value; the others
// are refused (TestRefusals).
func TestEveryFieldImported(t *testing.T) {
	res := importFile(t, "testdata/all-fields.yaml")
	cfg := load(t, res)
	var h, g *config.Binding
	for _, b := range cfg.Bindings {
		switch b.Name {
		case "http_api":
			h = b
		case "grpc_api":
			g = b
		}
	}
	if h == nil || g == nil {
		t.Fatalf("bindings missing: %+v", cfg.Bindings)
	}
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	// http-kafka options
	check("idempotency.header", h.HTTP.IdempotencyHeader, "x-request-key")
	check("correlation.headers.reply-to", h.HTTP.Correlation.ReplyTo, "app:reply-to")
	check("correlation.headers.correlation-id", h.HTTP.Correlation.CorrelationID, "app:cid")
	// routes: guarded, when.method, when.path, exit
	r0, r1, r2, r3 := h.Routes[0], h.Routes[1], h.Routes[2], h.Routes[3]
	check("guarded guard", r0.Guarded[0].Guard, "auth")
	check("guarded roles", strings.Join(r0.Guarded[0].Roles, ","), "read:items")
	check("when.method", r0.When[0].Method, "GET")
	check("when.path", r0.When[0].Path.Raw, "/items")
	check("exit (through the cache binding)", r0.Exit, "brokers")
	// fetch with
	check("fetch capability", r0.With.Capability, config.Fetch)
	check("fetch topic", r0.With.Topic.Raw, "items")
	check("merge.content-type", r0.With.Merge.ContentType, "application/json")
	check("merge.patch.initial", r0.With.Merge.PatchInitial, "[]")
	check("merge.patch.path", r0.With.Merge.PatchPath, "/-")
	check("filters.key", r1.With.Filters[0].Key.Raw, "${params.id}")
	check("filters.headers", r1.With.Filters[0].Headers[0].Name+"="+r1.With.Filters[0].Headers[0].Value.Raw, "tenant=acme")
	// produce with
	check("produce capability", r2.With.Capability, config.Produce)
	check("templated topic", r2.With.Topic.Raw, "items-${params.user}")
	check("topic-pattern added", r2.With.TopicPattern, "items-*")
	check("acks", r2.With.Acks, config.AcksLeaderOnly)
	check("key", r2.With.Key.Raw, "${params.id}")
	check("overrides", r2.With.Overrides[0].Name+"="+r2.With.Overrides[0].Value.Raw, "owner=${guarded['auth'].identity}")
	check("reply-to", r2.With.ReplyTo, "items-replies")
	check("async", r2.With.Async[0].Name+"="+r2.With.Async[0].Value.Raw, "location=/items/${params.id};cid=${correlationId}")
	check("guarded without roles", len(r2.Guarded[0].Roles), 0)
	check("acks none", r3.With.Acks, config.AcksNone)
	check("key idempotencyKey", r3.With.Key.Raw, "${idempotencyKey}")

	// grpc-kafka options
	check("idempotency.metadata", g.GRPC.IdempotencyMetadata, "x-call-key")
	check("reliability.field", g.GRPC.ReliabilityField, 32000)
	check("reliability.metadata", g.GRPC.ReliabilityMetadata, "x-last-id")
	check("correlation.headers.service", g.GRPC.Correlation.Service, "app:service")
	check("correlation.headers.method", g.GRPC.Correlation.Method, "app:method")
	check("correlation.headers.correlation-id", g.GRPC.Correlation.CorrelationID, "app:cid")
	check("correlation.headers.reply-to", g.GRPC.Correlation.ReplyTo, "app:reply-to")
	q0, q1 := g.Routes[0], g.Routes[1]
	check("grpc when.method", q0.When[0].GRPCMethod, "example.Fanout/Subscribe")
	md := map[string]config.MetadataMatch{}
	for _, m := range q0.When[0].Metadata {
		md[m.Name] = m
	}
	check("metadata text", string(md["tenant"].Value), "acme")
	// Zilla's {base64} (URL-safe) on `trace` is the binary entry trace-bin.
	want, _ := base64.URLEncoding.DecodeString("AAEC_w==")
	check("metadata base64 → -bin", string(md["trace-bin"].Value), string(want))
	check("metadata base64 binary", md["trace-bin"].Binary, true)
	check("grpc fetch topic", q0.With.Topic.Raw, "fanout")
	check("grpc filters.key", q0.With.Filters[0].Key.Raw, "acme")
	check("grpc filters.headers", q0.With.Filters[0].Headers[0].Name, "kind")
	check("grpc guarded", q1.Guarded[0].Roles[0], "write")
	check("grpc when.method wildcard", q1.When[0].GRPCMethod, "example.Echo/*")
	check("grpc produce acks", q1.With.Acks, config.AcksInSyncReplicas)
	check("grpc produce key", q1.With.Key.Raw, "${idempotencyKey}")
	check("grpc produce overrides", q1.With.Overrides[0].Value.Raw, "grpc")
	check("grpc produce reply-to", q1.With.ReplyTo, "echo-responses")

	// kafka client: servers and SASL from the same variables
	k := cfg.Kafka["brokers"].Properties
	check("bootstrap.servers", k["bootstrap.servers"], "kafka-1:9092,kafka-2:9092")
	check("security.protocol", k["security.protocol"], "SASL_PLAINTEXT")
	check("sasl.mechanisms", k["sasl.mechanisms"], "PLAIN")
	check("sasl.username", k["sasl.username"], "env-KAFKA_USER")
	check("sasl.password", k["sasl.password"], "env-KAFKA_PASSWORD")
	// jwt guard in Zilla's shape
	j := cfg.Guards["auth"].JWT
	check("issuer", j.Issuer, "https://auth.example.com")
	check("audience", j.Audience, "https://api.example.com")
	check("roles → roles-claim", j.RolesClaim, "permissions")
	check("identity → identity-claim", j.IdentityClaim, "email")
	if !bytes.Contains(j.Keys, []byte(`"kid":"key-1"`)) {
		t.Errorf("keys = %s, want the inline JWK", j.Keys)
	}
	for _, comment := range []string{"# challenge (30 s before expiry", "# Zilla has no topic-pattern", "# Zilla's trace: {base64} is the binary entry trace-bin"} {
		if !bytes.Contains(res.Config, []byte(comment)) {
			t.Errorf("no comment %q in the output", comment)
		}
	}
}

// What cannot be translated is an error at its line, with the reason.
func TestRefusals(t *testing.T) {
	const head = "bindings:\n  brokers: { type: kafka, kind: client, options: { servers: [\"k:9092\"] } }\n"
	const route = "  api:\n    type: http-kafka\n    kind: proxy\n    routes:\n      - exit: brokers\n        when: [{ method: POST, path: /items }]\n"
	// kg is a kafka-grpc binding with its client chain, from changes to
	// it.
	kg := func(from, to string) string {
		src := head + "  remote:\n    type: kafka-grpc\n    kind: remote_server\n    entry: brokers\n    routes:\n" +
			"      - exit: svc_grpc\n        when: [{ topic: q, reply-to: r, method: a.B/* }]\n        with: { scheme: http, authority: \"s:1\" }\n" +
			"  svc_grpc: { type: grpc, kind: client, exit: svc_http }\n" +
			"  svc_http: { type: http, kind: client, options: { versions: [h2] }, exit: svc_tcp }\n" +
			"  svc_tcp: { type: tcp, kind: client, options: { host: s, port: 8443 } }\n"
		if !strings.Contains(src, from) {
			panic("no " + from)
		}
		return strings.Replace(src, from, to, 1)
	}
	cases := []struct {
		name, src string
		line      int
		want      string
	}{
		{"http with.correlation-id", head + route + "        with: { capability: produce, topic: t, reply-to: r, correlation-id: requestId }\n",
			9, "with.correlation-id (requestId: a per-route name for the correlation header"},
		{"http binding exit", head + "  api:\n    type: http-kafka\n    kind: proxy\n    exit: brokers\n    routes:\n      - exit: brokers\n        with: { capability: fetch, topic: t, merge: { content-type: application/json } }\n",
			6, "a binding-level exit has no `with`"},
		{"http entry", head + "  api:\n    type: http-kafka\n    kind: proxy\n    entry: x\n    routes:\n      - exit: brokers\n        with: { capability: fetch, topic: t, merge: { content-type: application/json } }\n",
			6, "binding api: entry has no meaning on a http-kafka binding"},
		{"grpc vault", head + "  api:\n    type: grpc-kafka\n    kind: proxy\n    vault: v\n    routes:\n      - exit: brokers\n        with: { capability: fetch, topic: t }\n",
			6, "binding api: vault has no meaning on a grpc-kafka binding"},
		{"grpc catalog", head + "  api:\n    type: grpc-kafka\n    kind: proxy\n    catalog: { c: [] }\n    routes:\n      - exit: brokers\n        with: { capability: fetch, topic: t }\n",
			6, "binding api: catalog has no meaning on a grpc-kafka binding"},
		{"grpc merge", head + "  api:\n    type: grpc-kafka\n    kind: proxy\n    routes:\n      - exit: brokers\n        with: { capability: fetch, topic: t, merge: { content-type: application/json } }\n",
			8, "with.merge is not a field the importer knows"},
		{"path wildcard", head + "  api:\n    type: http-kafka\n    kind: proxy\n    routes:\n      - exit: brokers\n        when: [{ path: /items/* }]\n        with: { capability: fetch, topic: t, merge: { content-type: application/json } }\n",
			8, "Zilla's * (any text) cannot be translated"},
		{"dynamic roles", head + route + "        guarded: { g: [\"${method}:${path}\"] }\n        with: { capability: produce, topic: t }\n" + "guards:\n  g: { type: jwt, options: { keys: [{ kty: EC, kid: a }] } }\n",
			9, "uses ${method} or ${path}"},
		{"guard attributes", head + route + "        with: { capability: produce, topic: t, key: \"${guarded['g'].attributes.tenant}\" }\n",
			9, "guards here expose only ${guarded['g'].identity}"},
		{"jwks url", "guards:\n  g: { type: jwt, options: { keys: https://auth.example.com/jwks.json } }\n" + head,
			2, "keys from a URL (https://auth.example.com/jwks.json) cannot be translated"},
		{"scram-sha-1", "bindings:\n  brokers: { type: kafka, kind: client, options: { servers: [\"k:9092\"], sasl: { mechanism: scram-sha-1, username: u, password: p } } }\n",
			2, "SASL mechanism \"scram-sha-1\" cannot be translated"},
		{"oauthbearer token", "guards:\n  login: { type: inline, options: { identity: app } }\nbindings:\n  brokers:\n    type: kafka\n    kind: client\n    options:\n      servers: [\"k:9092\"]\n      authorization:\n        login:\n          credentials: { mechanism: oauthbearer, token: \"${{env.TOKEN}}\" }\n",
			11, "sasl.oauthbearer.method: oidc, sasl.oauthbearer.token.endpoint.url:"},
		{"other expression", "bindings:\n  brokers: { type: kafka, kind: client, options: { servers: [\"${{vault.x}}\"] } }\n",
			2, "${{vault.x}}: only ${{env.NAME}} expressions"},
		{"kafka-grpc without entry", kg("    entry: brokers\n", ""), 4, "binding remote has no entry: the kafka binding its request topics are read through"},
		{"kafka-grpc key condition", kg("reply-to: r, method: a.B/* }", "reply-to: r, method: a.B/*, key: k1 }"),
			9, "when.key cannot be translated: a kafka-grpc route here selects records by topic, reply-to and method only"},
		{"kafka-grpc without method", kg(", method: a.B/* }", " }"), 9, "a kafka-grpc condition without method cannot be translated"},
		{"kafka-grpc chain to a kafka binding", kg("exit: svc_grpc", "exit: brokers"), 8,
			"exit brokers is a kafka client binding: a kafka-grpc route's chain must be a grpc client, an http client, optionally a tls client, then a tcp client; write a kafka-grpc binding by hand"},
		{"kafka-grpc chain refusal points at the service contract", kg("exit: svc_grpc", "exit: brokers"), 8,
			"docs/service-contract.md says what to read and write"},
		{"kafka-grpc grpc client with two exits", kg("  svc_grpc: { type: grpc, kind: client, exit: svc_http }",
			"  svc_grpc: { type: grpc, kind: client, routes: [{ exit: svc_http }, { exit: other }] }"),
			11, "grpc client svc_grpc routes methods to different bindings (svc_http, other)"},
		{"kafka-grpc HTTP/1.1", kg("versions: [h2]", "versions: [http/1.1]"), 12, "http client svc_http: versions [http/1.1]: gRPC needs HTTP/2"},
		{"kafka-grpc two ports", kg("port: 8443", "port: [8443, 8444]"), 13, "tcp client svc_tcp: a kafka-grpc route needs one host and one port"},
		{"kafka-grpc TLS trust from a vault", kg("exit: svc_tcp }", "exit: svc_tls }\n  svc_tls: { type: tls, kind: client, vault: v, options: { trust: [ca] }, exit: svc_tcp }"),
			13, "tls client svc_tls: options.trust from vault v cannot be translated: a kafka-grpc route reads the CA (ca-file; from a PKCS#12 store: openssl pkcs12 -in STORE -nokeys -out ca.pem) from PEM files when the configuration loads"},
		{"kafka-grpc TLS keys from a vault", kg("exit: svc_tcp }", "exit: svc_tls }\n  svc_tls: { type: tls, kind: client, vault: v, options: { keys: [me] }, exit: svc_tcp }"),
			13, "options.keys from vault v cannot be translated"},
		{"sse event id with the key", head + "  events:\n    type: sse-kafka\n    kind: proxy\n    routes:\n      - exit: brokers\n        when: [{ path: /events }]\n        with: { topic: t, event: { id: '[\"${base64(key)}\",\"${etag}\"]' } }\n",
			9, "with.event.id [\"${base64(key)}\",\"${etag}\"] cannot be translated: the event id here is ${etag}"},
		{"mqtt", head + "  events:\n    type: mqtt\n    kind: server\n",
			4, "type mqtt kind server cannot be translated"},
		{"unknown top level", "stores: {}\n" + head, 1, "top-level \"stores\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Import("zilla.yaml", []byte(c.src))
			var errs config.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want config.Errors", err)
			}
			for _, e := range errs {
				if e.Pos.Line == c.line && strings.Contains(e.Msg, c.want) {
					return
				}
			}
			t.Errorf("no error at line %d containing %q:\n%v", c.line, c.want, err)
		})
	}
}

// An http server reading a jwt guard's token from a query parameter or a
// cookie ({credentials}) gives the sse-kafka bindings behind it the same
// credentials options; the guarded route keeps its roles.
func TestSSECredentialsImported(t *testing.T) {
	src := `bindings:
  web:
    type: http
    kind: server
    options:
      authorization:
        jwt0:
          credentials:
            query: { access_token: "{credentials}" }
            cookies: { session: "{credentials}" }
    exit: sse0
  sse0: { type: sse, kind: server, exit: events }
  events:
    type: sse-kafka
    kind: proxy
    routes:
      - exit: brokers
        guarded: { jwt0: ["read:events"] }
        when: [{ path: "/events/{id}" }]
        with: { topic: events, filters: [{ key: "${params.id}" }], event: { id: "${etag}" } }
  brokers: { type: kafka, kind: client, options: { servers: ["k:9092"] } }
guards:
  jwt0: { type: jwt, options: { issuer: https://auth.example.com, keys: [{ kty: EC, kid: a, crv: P-256, x: AA, y: AA }] } }
`
	res, err := Import("zilla.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	cfg := load(t, res)
	var b *config.Binding
	for _, x := range cfg.Bindings {
		if x.Name == "events" {
			b = x
		}
	}
	if b == nil || b.Type != config.SSEKafka || b.SSE == nil || *b.SSE != (config.SSEOptions{CredentialsQuery: "access_token", CredentialsCookie: "session"}) {
		t.Fatalf("the sse-kafka binding: %+v\n%s", b, res.Config)
	}
	r := b.Routes[0]
	if r.With.Topic.Raw != "events" || len(r.With.Filters) != 1 || r.With.Filters[0].Key.Raw != "${params.id}" ||
		len(r.Guarded) != 1 || r.Guarded[0].Roles[0] != "read:events" || r.When[0].Path.Raw != "/events/{id}" {
		t.Fatalf("the route: %+v %+v", r, r.With)
	}
}

// The generated Envoy configuration of an http server with access-control
// and versions carries a CORS filter and the listener protocol, and passes
// the checks; moving the CORS filter after ext_proc fails them.
func TestEnvoyCORSAndVersions(t *testing.T) {
	res := importFile(t, "testdata/examples/grpc.kafka.echo.yaml")
	for _, want := range []string{"codec_type: HTTP2", "envoy.extensions.filters.http.cors.v3.Cors", "port_value: 7151", "prefix: /example.Echo/, grpc: {}", "value: echo_api"} {
		if !bytes.Contains(res.Envoy, []byte(want)) {
			t.Errorf("envoy.yaml lacks %q", want)
		}
	}
	// Swap the CORS and ext_proc filters.
	s := string(res.Envoy)
	corsAt := strings.Index(s, "          # Before ext_proc")
	extAt := strings.Index(s, "          - name: envoy.filters.http.ext_proc")
	routerAt := strings.Index(s, "          - name: envoy.filters.http.router")
	swapped := s[:corsAt] + s[extAt:routerAt] + s[corsAt:extAt] + s[routerAt:]
	b, err := envoy.Parse([]byte(swapped))
	if err != nil {
		t.Fatal(err)
	}
	if err := envoy.Check(b, envoy.CheckOptions{}); err == nil || !strings.Contains(err.Error(), "the CORS filter must come before ext_proc") {
		t.Errorf("Check of CORS after ext_proc = %v", err)
	}
}

// The excerpt docs/from-zilla.md shows is what the import prints.
func TestGuideExcerpt(t *testing.T) {
	doc, err := os.ReadFile("../docs/from-zilla.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	excerpt, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/from-zilla.md has no yaml excerpt")
	}
	res := importFile(t, "testdata/examples/http.kafka.oneway.yaml")
	if !strings.Contains(string(res.Config), excerpt) {
		t.Errorf("the import of http.kafka.oneway does not contain the guide's excerpt:\n%s", excerpt)
	}
}

// A kafka client without options.servers, Zilla's older shape, takes its
// brokers from the tcp client it exits to (directly or through a tls
// client); with neither it is an error at the binding's line, not a crash.
func TestKafkaClientBrokersFromItsTCPClient(t *testing.T) {
	res := importFile(t, "testdata/examples/http.kafka.schema.registry.yaml")
	k := load(t, res).Kafka["brokers"].Properties
	if got := k["bootstrap.servers"]; got != "kafka:29092" {
		t.Errorf("bootstrap.servers = %q, want the tcp client's kafka:29092", got)
	}
	const via = "bindings:\n  brokers: { type: kafka, kind: client, exit: brokers_tls }\n" +
		"  brokers_tls: { type: tls, kind: client, exit: brokers_tcp, options: { trustcacerts: true } }\n" +
		"  brokers_tcp: { type: tcp, kind: client, options: { host: \"${{env.KAFKA_HOST}}\", port: 9093 } }\n" +
		"  api: { type: http-kafka, kind: proxy, routes: [{ exit: brokers, when: [{ method: POST, path: /items }], with: { capability: produce, topic: t } }] }\n"
	got, err := Import("zilla.yaml", []byte(via))
	if err != nil {
		t.Fatal(err)
	}
	if k := load(t, got).Kafka["brokers"].Properties; k["bootstrap.servers"] != "env-KAFKA_HOST:9093" || k["security.protocol"] != "SSL" {
		t.Errorf("through a tls client: %v, want env-KAFKA_HOST:9093 over SSL", k)
	}
	for _, src := range []string{
		"bindings:\n  brokers: { type: kafka, kind: client }\n",
		"bindings:\n  brokers: { type: kafka, kind: client, exit: brokers_tcp }\n  brokers_tcp: { type: tcp, kind: client }\n",
		"bindings:\n  brokers: { type: kafka, kind: client, options: { servers: [] } }\n",
	} {
		_, err := Import("zilla.yaml", []byte(src))
		var errs config.Errors
		if !errors.As(err, &errs) || errs[0].Pos.Line != 2 || !strings.Contains(errs[0].Msg, "kafka client brokers") {
			t.Errorf("%s: err = %v, want an error at line 2 naming the kafka client", src, err)
		}
	}
}

// The examples whose features have no translation are refused at each
// feature's line, each with its reason and what to do instead; the request
// contract's example imports once its contract is taken out.
func TestRefusedExamples(t *testing.T) {
	for _, c := range []struct {
		file  string
		lines map[int]string
	}{
		{"testdata/examples/http.kafka.avro.json.yaml", map[int]string{
			30: "options.requests (request contracts: a path and method whose bodies must match a schema) cannot be translated: kafka-ext-proc checks bodies against the model of the topic",
		}},
		{"testdata/examples/http.kafka.avro.json.headers.yaml", map[int]string{
			39: "key: ${headers.x-user-id} cannot be translated: routes here reference path parameters",
			41: "overrides.user-id: ${headers.x-user-id} cannot be translated: routes here reference path parameters",
			53: "filters[].headers.user-id: ${headers.x-user-id} cannot be translated",
			75: "topic items: transforms (a record key extracted from the fields of the message) cannot be translated",
		}},
	} {
		_, err := Import(c.file, mustRead(t, c.file))
		var errs config.Errors
		if !errors.As(err, &errs) {
			t.Fatalf("%s: err = %v, want config.Errors", c.file, err)
		}
		for line, want := range c.lines {
			found := false
			for _, e := range errs {
				found = found || (e.Pos.Line == line && strings.Contains(e.Msg, want))
			}
			if !found {
				t.Errorf("%s: no error at line %d containing %q:\n%v", c.file, line, want, err)
			}
		}
		if len(errs) != len(c.lines) {
			t.Errorf("%s: %d errors, want %d:\n%v", c.file, len(errs), len(c.lines), err)
		}
	}
	src := string(mustRead(t, "testdata/examples/http.kafka.avro.json.yaml"))
	before, rest, _ := strings.Cut(src, "    options:\n      requests:\n")
	_, after, _ := strings.Cut(rest, "    routes:\n")
	res, err := Import("zilla.yaml", []byte(before+"    routes:\n"+after))
	if err != nil {
		t.Fatalf("without its request contract: %v", err)
	}
	if !strings.Contains(string(res.Config), `url: "${env:SCHEMA_REGISTRY_SERVER}"`) {
		t.Errorf("the registry url is not the variable:\n%s", res.Config)
	}
}
