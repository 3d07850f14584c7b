package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

func load(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	return cfg
}

func generate(t *testing.T, cfg *config.Config, opts Options) (*Document, []byte) {
	t.Helper()
	doc, err := Generate(cfg, opts)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	js, err := doc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return doc, js
}

// validate checks a rendered document with libopenapi: it parses as OpenAPI
// 3.1, builds a model without errors, and passes the validator's check
// against the OpenAPI 3.1 JSON Schema. It returns the validator.
func validate(t *testing.T, spec []byte) validator.Validator {
	t.Helper()
	v, problems := check(spec)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		t.FailNow()
	}
	return v
}

func check(spec []byte) (validator.Validator, []string) {
	d, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, []string{"libopenapi cannot read the document: " + err.Error()}
	}
	if v := d.GetVersion(); v != Version {
		return nil, []string{fmt.Sprintf("libopenapi reads version %q, want %q", v, Version)}
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		return nil, []string{fmt.Sprintf("building the model: %v", errs)}
	}
	var problems []string
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			problems = append(problems, "invalid OpenAPI 3.1: "+e.Message+": "+e.Reason)
			for _, se := range e.SchemaValidationErrors {
				problems = append(problems, fmt.Sprintf("  %s at %s (%s)", se.Reason, se.FieldPath, se.KeywordLocation))
			}
		}
	}
	return v, problems
}

// checkSemantics checks what the OpenAPI schema cannot: every template
// parameter is declared as a required path parameter, operation ids are
// unique, and every $ref resolves inside the document.
func checkSemantics(t *testing.T, doc *Document, js []byte) {
	t.Helper()
	tmpl := regexp.MustCompile(`\{([^}]+)\}`)
	ids := map[string]bool{}
	for path, item := range doc.Paths {
		var declared []string
		for _, p := range item.Parameters {
			if p.In != "path" || !p.Required {
				t.Errorf("%s: path-level parameter %q is not a required path parameter", path, p.Name)
			}
			declared = append(declared, p.Name)
		}
		var used []string
		for _, m := range tmpl.FindAllStringSubmatch(path, -1) {
			used = append(used, m[1])
		}
		if !slices.Equal(declared, used) {
			t.Errorf("%s: declares path parameters %v, template has %v", path, declared, used)
		}
		for _, m := range []string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"} {
			op := item.Operation(m)
			if op == nil {
				continue
			}
			if ids[op.OperationID] {
				t.Errorf("duplicate operationId %q", op.OperationID)
			}
			ids[op.OperationID] = true
			if len(op.Responses) == 0 {
				t.Errorf("%s %s: no responses", m, path)
			}
		}
	}
	var tree any
	if err := json.Unmarshal(js, &tree); err != nil {
		t.Fatal(err)
	}
	var walk func(any)
	walk = func(n any) {
		switch v := n.(type) {
		case map[string]any:
			for k, c := range v {
				if k == "$ref" {
					if !resolves(tree, c.(string)) {
						t.Errorf("$ref %q does not resolve", c)
					}
					continue
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(tree)
}

func resolves(tree any, ref string) bool {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	n := tree
	for _, tok := range strings.Split(rest, "/") {
		m, ok := n.(map[string]any)
		if !ok {
			return false
		}
		if n, ok = m[strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)]; !ok {
			return false
		}
	}
	return true
}

func TestDemoConfig(t *testing.T) {
	cfg := load(t, "../cmd/kafka-ext-proc/demo.yaml")
	doc, js := generate(t, cfg, Options{Servers: []string{"http://localhost:8080"}})
	validate(t, js)
	checkSemantics(t, doc, js)
	y, err := doc.YAML()
	if err != nil {
		t.Fatal(err)
	}
	validate(t, y)

	want := map[string][]string{
		"/items":                           {"GET", "HEAD", "POST"},
		"/items/{id}":                      {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"},
		"/orders/{id}":                     {"POST"},
		"/orders/{id};cid={correlationId}": {"GET"},
	}
	if len(doc.Paths) != len(want) {
		t.Errorf("paths %v, want %v", keys(doc.Paths), keys(want))
	}
	for path, methods := range want {
		item := doc.Paths[path]
		if item == nil {
			t.Errorf("no path %s", path)
			continue
		}
		for _, m := range methods {
			if item.Operation(m) == nil {
				t.Errorf("%s: no %s", path, m)
			}
		}
		if item.Operation("OPTIONS") != nil || item.Operation("TRACE") != nil {
			t.Errorf("%s: lists OPTIONS or TRACE", path)
		}
	}

	merged := doc.Paths["/items"].Get
	if mt := merged.Responses["200"].Content["application/json"]; mt == nil || mt.Schema.Type != "array" {
		t.Errorf("merged fetch 200: %+v, want an application/json array", merged.Responses["200"])
	}
	if merged.Responses["200"].Headers["etag"] == nil {
		t.Error("merged fetch 200 has no etag header")
	}
	one := doc.Paths["/items/{id}"].Get
	for _, code := range []string{"200", "204", "304", "404", "503"} {
		if one.Responses[code] == nil {
			t.Errorf("filtered fetch: no %s", code)
		}
	}
	if !hasParam(one, "IfNoneMatch") || !hasParam(one, "PreferWait") {
		t.Errorf("filtered fetch parameters %+v, want if-none-match and prefer", one.Parameters)
	}
	if head := doc.Paths["/items/{id}"].Head; head.Responses["200"].Content != nil {
		t.Error("HEAD 200 has content")
	}

	post := doc.Paths["/orders/{id}"].Post
	for _, code := range []string{"200", "202", "400", "413", "502", "503", "504"} {
		if post.Responses[code] == nil {
			t.Errorf("async produce: no %s", code)
		}
	}
	if post.Responses["202"].Headers["location"] == nil {
		t.Error("async produce 202 has no location header")
	}
	if !hasParam(post, "IdempotencyKey") || !hasParam(post, "PreferAsync") {
		t.Errorf("async produce parameters %+v", post.Parameters)
	}
	if post.RequestBody == nil {
		t.Error("POST has no request body")
	}
	if del := doc.Paths["/items/{id}"].Delete; del.RequestBody != nil || del.Responses["204"] == nil {
		t.Errorf("oneway DELETE: body %v, responses %v", del.RequestBody, keys(del.Responses))
	}
	follow := doc.Paths["/orders/{id};cid={correlationId}"].Get
	if !follow.Route.FollowUp || follow.Responses["202"] == nil || hasParam(follow, "IdempotencyKey") {
		t.Errorf("follow-up: %+v", follow)
	}
	if doc.Components.SecuritySchemes != nil {
		t.Errorf("demo has no guards, got security schemes %v", doc.Components.SecuritySchemes)
	}

	// The path templates route as the processor's do, including `;cid=`.
	v := validate(t, js)
	for _, c := range []struct{ method, url string }{
		{"GET", "http://localhost:8080/items/abc"},
		{"GET", "http://localhost:8080/orders/o1;cid=k1-0123abcd"},
	} {
		req, _ := http.NewRequest(c.method, c.url, nil)
		if ok, errs := v.ValidateHttpRequest(req); !ok {
			for _, e := range errs {
				t.Errorf("%s %s: %s: %s", c.method, c.url, e.Message, e.Reason)
			}
		}
	}
}

func TestAsyncAndGuards(t *testing.T) {
	cfg := load(t, "testdata/async-guards.yaml")
	doc, js := generate(t, cfg, Options{Title: "Orders", Version: "2.1.0"})
	validate(t, js)
	checkSemantics(t, doc, js)
	if doc.Info.Title != "Orders" || doc.Info.Version != "2.1.0" {
		t.Errorf("info %+v", doc.Info)
	}

	put := doc.Paths["/orders/{id}"].Put
	if put == nil || put.Route.Route != 0 {
		t.Fatalf("PUT /orders/{id}: %+v, want route 0 (route 2 is shadowed)", put)
	}
	if want := []map[string][]string{{"jwt0": {"write:orders"}}}; !equalSecurity(put.Security, want) {
		t.Errorf("PUT security %v, want %v", put.Security, want)
	}
	for _, code := range []string{"401", "403"} {
		if put.Responses[code] == nil {
			t.Errorf("guarded PUT: no %s", code)
		}
	}
	accepted := put.Responses["202"]
	if accepted == nil || accepted.Headers["location"] == nil || accepted.Headers["x-order"] == nil {
		t.Errorf("PUT 202 %+v, want location and x-order headers", accepted)
	}

	// /orders/{orderId} has the shape of /orders/{id}: one OpenAPI path.
	get := doc.Paths["/orders/{id}"].Get
	if get == nil || get.Route.Route != 1 {
		t.Fatalf("GET /orders/{id}: %+v, want route 1", get)
	}
	if _, dup := doc.Paths["/orders/{orderId}"]; dup {
		t.Error("/orders/{orderId} listed beside /orders/{id}")
	}
	if want := []map[string][]string{{"jwt0": {"read:orders"}, "ejwt": {}}}; !equalSecurity(get.Security, want) {
		t.Errorf("GET security %v, want %v", get.Security, want)
	}
	if !bytes.Contains(js, []byte(`"ejwt": []`)) {
		t.Error("a guard without roles must list [] (null is invalid)")
	}
	for name, s := range doc.Components.SecuritySchemes {
		if s.Type != "http" || s.Scheme != "bearer" || s.BearerFormat != "JWT" {
			t.Errorf("security scheme %s: %+v", name, s)
		}
	}
	if len(doc.Components.SecuritySchemes) != 2 {
		t.Errorf("security schemes %v, want jwt0 and ejwt", keys(doc.Components.SecuritySchemes))
	}
	if p := doc.Components.Parameters["IdempotencyKey"]; p == nil || p.Name != "x-idempotency" {
		t.Errorf("idempotency parameter %+v, want the configured header x-idempotency", p)
	}

	follow := doc.Paths["/orders/{id};cid={correlationId}"].Get
	if follow == nil || !follow.Route.FollowUp || len(follow.Security) != 1 {
		t.Errorf("follow-up %+v, want a guarded follow-up", follow)
	}

	events := doc.Paths["/events/{id}"]
	// The router's rule (config.MethodsOf): a path-only produce writes for
	// GET too, and never for OPTIONS, HEAD or TRACE.
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		op := events.Operation(m)
		if op == nil || op.Responses["204"] == nil || op.Responses["202"] != nil {
			t.Errorf("oneway %s /events/{id}: %+v, want 204 and no 202", m, op)
		}
	}
	for _, m := range []string{"OPTIONS", "HEAD", "TRACE"} {
		if events.Operation(m) != nil {
			t.Errorf("a path-only produce condition lists %s", m)
		}
	}

	tenant := doc.Paths["/tenants/{tenant}/items"].Get
	if tenant.Responses["400"] == nil || tenant.Responses["404"] == nil {
		t.Errorf("templated topic: responses %v, want 400 and 404", keys(tenant.Responses))
	}

	for _, want := range []string{"route 2: PUT /orders/{x} is answered by http0_route0_when0_put first", "route 5 (produce audit) matches POST on every path"} {
		if !strings.Contains(doc.Info.Description, want) {
			t.Errorf("description lacks %q:\n%s", want, doc.Info.Description)
		}
	}
}

func TestBindingChoice(t *testing.T) {
	two := `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "k:9092" } }
  a: { type: http-kafka, kind: proxy, routes: [{ when: [{ method: GET, path: /a }], exit: kafka0, with: { capability: fetch, topic: t, merge: { content-type: application/json } } }] }
  b: { type: http-kafka, kind: proxy, routes: [{ when: [{ method: GET, path: /b }], exit: kafka0, with: { capability: fetch, topic: t, merge: { content-type: application/json } } }] }
  g: { type: grpc-kafka, kind: proxy, routes: [{ when: [{ service: x.Y }], exit: kafka0, with: { capability: fetch, topic: t } }] }
`
	cfg, err := config.Parse("two.yaml", []byte(two), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "several http-kafka or sse-kafka bindings (a, b)") {
		t.Errorf("no binding chosen: %v", err)
	}
	if _, err := Generate(cfg, Options{Binding: "g"}); err == nil || !strings.Contains(err.Error(), `no http-kafka or sse-kafka binding "g"`) {
		t.Errorf("grpc binding chosen: %v", err)
	}
	doc, js := generate(t, cfg, Options{Binding: "b"})
	validate(t, js)
	if _, ok := doc.Paths["/b"]; !ok || len(doc.Paths) != 1 {
		t.Errorf("paths %v, want /b", keys(doc.Paths))
	}

	grpcOnly, err := config.Parse("g.yaml", []byte(`
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "k:9092" } }
  g: { type: grpc-kafka, kind: proxy, routes: [{ when: [{ service: x.Y }], exit: kafka0, with: { capability: fetch, topic: t } }] }
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(grpcOnly, Options{}); err == nil || !strings.Contains(err.Error(), "no http-kafka or sse-kafka binding") {
		t.Errorf("grpc-only config: %v", err)
	}
}

// The validation above is only worth something if it refuses a broken
// document: a response without its required description.
func TestValidationCatchesMistakes(t *testing.T) {
	doc, _ := generate(t, load(t, "../cmd/kafka-ext-proc/demo.yaml"), Options{})
	doc.Paths["/items"].Get.Responses["200"].Description = ""
	js, err := doc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, problems := check(js); len(problems) == 0 {
		t.Error("a response without description passed validation")
	}
}

// The configurations of the examples with HTTP routes: their documents
// validate, as JSON and as YAML, and list the routes' paths and methods.
func TestExampleConfigs(t *testing.T) {
	for example, want := range map[string]map[string][]string{
		"http.kafka.crud": {
			"/items":      {"GET", "HEAD", "POST"},
			"/items/{id}": {"GET", "HEAD", "PUT", "DELETE"},
		},
		"http.kafka.async": {
			"/orders/{id}":                     {"POST"},
			"/orders/{id};cid={correlationId}": {"GET"},
		},
		"sse.kafka.fanout": {
			"/events": {"GET", "HEAD"},
		},
	} {
		t.Run(example, func(t *testing.T) {
			doc, js := generate(t, load(t, "../examples/"+example+"/config.yaml"), Options{Servers: []string{"http://127.0.0.1:8080"}})
			validate(t, js)
			checkSemantics(t, doc, js)
			y, err := doc.YAML()
			if err != nil {
				t.Fatal(err)
			}
			validate(t, y)
			if len(doc.Paths) != len(want) {
				t.Errorf("paths %v, want %v", keys(doc.Paths), keys(want))
			}
			for path, methods := range want {
				for _, m := range methods {
					if doc.Paths[path] == nil || doc.Paths[path].Operation(m) == nil {
						t.Errorf("no %s %s", m, path)
					}
				}
			}
			if example == "sse.kafka.fanout" {
				op := doc.Paths["/events"].Get
				if op.Responses["200"].Content["text/event-stream"] == nil || op.Responses["406"] == nil || op.Responses["410"] == nil ||
					len(op.Parameters) != 2 || op.Parameters[0].Name != "accept" || !op.Parameters[0].Required {
					t.Errorf("the event stream's operation: %+v", op)
				}
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	cfg := load(t, "testdata/async-guards.yaml")
	_, a := generate(t, cfg, Options{})
	_, b := generate(t, cfg, Options{})
	if !bytes.Equal(a, b) {
		t.Error("two renderings of one configuration differ")
	}
}

func hasParam(op *Operation, component string) bool {
	return slices.ContainsFunc(op.Parameters, func(p *Parameter) bool { return p.Ref == "#/components/parameters/"+component })
}

func equalSecurity(a, b []map[string][]string) bool {
	return slices.EqualFunc(a, b, func(x, y map[string][]string) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !slices.Equal(v, w) {
				return false
			}
		}
		return true
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
