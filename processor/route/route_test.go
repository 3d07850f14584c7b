package route

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

func path(t testing.TB, raw string) *config.PathTemplate {
	t.Helper()
	p, err := config.ParsePathTemplate(raw)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fetch(topic string) *config.With {
	return &config.With{Capability: config.Fetch, Topic: config.Template{Raw: topic}}
}

func produce(topic string) *config.With {
	return &config.With{Capability: config.Produce, Topic: config.Template{Raw: topic}}
}

func httpTable(t testing.TB, routes ...*config.Route) *Binding {
	t.Helper()
	for i, r := range routes {
		r.Index = i
	}
	tbl, err := Build(&config.Config{Bindings: []*config.Binding{{Name: "http0", Type: config.HTTPKafka, Routes: routes}}})
	if err != nil {
		t.Fatal(err)
	}
	return tbl.Binding("http0")
}

func grpcTable(t testing.TB, routes ...*config.Route) *Binding {
	t.Helper()
	for i, r := range routes {
		r.Index = i
	}
	tbl, err := Build(&config.Config{Bindings: []*config.Binding{{Name: "grpc0", Type: config.GRPCKafka, Routes: routes}}})
	if err != nil {
		t.Fatal(err)
	}
	return tbl.Binding("grpc0")
}

func get(method, p string) *HTTPRequest {
	pth, _ := SplitPath(p)
	return &HTTPRequest{Method: method, Path: pth}
}

// crud is the CRUD route shape plus the correlated request-reply shape
// (docs/design.md#route-shapes).
func crud(t testing.TB) *Binding {
	return httpTable(t,
		&config.Route{When: []config.Condition{{Method: "POST", Path: path(t, "/items")}}, With: produce("items-requests")},
		&config.Route{When: []config.Condition{{Method: "GET", Path: path(t, "/items")}}, With: fetch("items-snapshots")},
		&config.Route{When: []config.Condition{{Method: "GET", Path: path(t, "/items/{id}")}}, With: fetch("items-snapshots")},
		&config.Route{When: []config.Condition{
			{Method: "PUT", Path: path(t, "/tasks/{id}")},
			{Method: "GET", Path: path(t, "/tasks/{id};cid={correlationId}")},
		}, With: produce("tasks-requests")},
		&config.Route{When: []config.Condition{{Path: path(t, "/items/{id}")}}, With: produce("items-requests")},
	)
}

func TestHTTPMatching(t *testing.T) {
	b := crud(t)
	for _, tc := range []struct {
		method, path string
		route        int // -1: no route
		cond         int
		params       map[string]string
	}{
		{"POST", "/items", 0, 0, nil},
		{"GET", "/items", 1, 0, nil},
		{"GET", "/items?limit=5&x=/y", 1, 0, nil},                      // query ignored
		{"GET", "/items/42", 2, 0, map[string]string{"id": "42"}},      // first matching route wins over route 4
		{"GET", "/items/42?if=1", 2, 0, map[string]string{"id": "42"}}, // query not in the parameter
		{"GET", "/items/a%20b", 2, 0, map[string]string{"id": "a b"}},  // decoded after matching
		{"GET", "/items/a%2Fb", 2, 0, map[string]string{"id": "a/b"}},  // %2F stays inside the segment
		{"GET", "/items/100%", 2, 0, map[string]string{"id": "100%"}},  // invalid escape kept
		{"GET", "/items/42/", -1, 0, nil},                              // no extra segment
		{"GET", "/items/", -1, 0, nil},                                 // empty segment
		{"GET", "/items/4;2", -1, 0, nil},                              // ';' ends a parameter
		{"DELETE", "/items/42", 4, 0, map[string]string{"id": "42"}},   // no method = any method
		{"PATCH", "/items/x.y", 4, 0, map[string]string{"id": "x.y"}},  // any method
		{"PUT", "/tasks/7", 3, 0, map[string]string{"id": "7"}},        // ORed when
		{"GET", "/tasks/7;cid=abc-123", 3, 1, map[string]string{"id": "7", "correlationId": "abc-123"}},
		{"GET", "/tasks/7;cx=abc", -1, 0, nil},                   // literal ;cid= compared literally
		{"GET", "/tasks/7;cid=", -1, 0, nil},                     // empty parameter
		{"GET", "/tasks/7;cid=a/b", -1, 0, nil},                  // '/' ends a parameter
		{"GET", "/tasks/7", -1, 0, nil},                          // GET condition needs the cid
		{"HEAD", "/items/9", 2, 0, map[string]string{"id": "9"}}, // HEAD on a GET fetch route
		{"HEAD", "/items", 1, 0, nil},                            // (route 0 is POST)
		{"HEAD", "/tasks/7;cid=c", -1, 0, nil},                   // not on a GET produce condition
		{"GET", "/ITEMS", -1, 0, nil},                            // case-sensitive
		{"GET", "/it%65ms", -1, 0, nil},                          // literals are not decoded
		{"POST", "/items/", -1, 0, nil},
		{"OPTIONS", "/other", -1, 0, nil},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			m, err := b.MatchHTTP(context.Background(), get(tc.method, tc.path), nil)
			if tc.route < 0 {
				if !errors.Is(err, ErrNoRoute) {
					t.Fatalf("got %v, %v; want no route", m, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Route.Index != tc.route || m.Condition != tc.cond || !maps.Equal(m.Params, tc.params) {
				t.Fatalf("route %d cond %d params %v; want %d %d %v", m.Route.Index, m.Condition, m.Params, tc.route, tc.cond, tc.params)
			}
			if m.Binding.Name != "http0" {
				t.Fatalf("binding %q", m.Binding.Name)
			}
		})
	}
}

func TestRouteWithoutWhenMatchesEveryPath(t *testing.T) {
	b := httpTable(t,
		&config.Route{When: []config.Condition{{Method: "GET", Path: path(t, "/a")}}, With: fetch("a")},
		&config.Route{With: produce("all")},
	)
	for _, r := range []*HTTPRequest{get("GET", "/b"), get("POST", "/a"), get("DELETE", "*"), get("GET", "")} {
		m, err := b.MatchHTTP(context.Background(), r, nil)
		if err != nil || m.Route.Index != 1 || m.Condition != -1 || m.Params != nil {
			t.Fatalf("%s %s: %+v, %v", r.Method, r.Path, m, err)
		}
	}
	// Every path, but only the methods a produce writes for: 405 otherwise.
	for _, method := range []string{"OPTIONS", "HEAD", "TRACE", "BREW"} {
		m, err := b.MatchHTTP(context.Background(), get(method, "/b"), nil)
		var me *MethodError
		if !errors.As(err, &me) || strings.Join(me.Allow, ",") != "GET,POST,PUT,PATCH,DELETE" {
			t.Fatalf("%s: %+v, %v; want a MethodError", method, m, err)
		}
	}
}

func TestMethodErrorAllowsWhatThePathAccepts(t *testing.T) {
	b := crud(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"OPTIONS", "/items/4", "GET,HEAD,POST,PUT,PATCH,DELETE"}, // fetch GET and path-only produce
		{"PUT", "/items", "GET,HEAD,POST"},
		{"GET", "/tasks/7", "PUT"},
		{"OPTIONS", "/other", ""}, // no condition matches the path: plain ErrNoRoute
	} {
		_, err := b.MatchHTTP(context.Background(), get(tc.method, tc.path), nil)
		var me *MethodError
		if !errors.Is(err, ErrNoRoute) {
			t.Fatalf("%s %s: %v, want no route", tc.method, tc.path, err)
		}
		if got := ""; errors.As(err, &me) {
			got = strings.Join(me.Allow, ",")
			if got != tc.allow {
				t.Errorf("%s %s: allow %q, want %q", tc.method, tc.path, got, tc.allow)
			}
		} else if tc.allow != "" {
			t.Errorf("%s %s: %v, want a MethodError", tc.method, tc.path, err)
		}
	}
}

func TestConditionWithMethodOnly(t *testing.T) {
	b := httpTable(t, &config.Route{When: []config.Condition{{Method: "DELETE"}}, With: produce("x")})
	if _, err := b.MatchHTTP(context.Background(), get("DELETE", "/anything/at/all"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.MatchHTTP(context.Background(), get("GET", "/anything"), nil); !errors.Is(err, ErrNoRoute) {
		t.Fatal(err)
	}
}

func TestGreedyParameterBeforeLiteral(t *testing.T) {
	b := httpTable(t,
		&config.Route{When: []config.Condition{{Method: "GET", Path: path(t, "/files/{name}.json")}}, With: fetch("f")},
		&config.Route{When: []config.Condition{{Method: "GET", Path: path(t, "/v{major}.{minor}/x")}}, With: fetch("v")},
	)
	for p, want := range map[string]map[string]string{
		"/files/a.json":         {"name": "a"},
		"/files/a.b.json":       {"name": "a.b"},
		"/files/.json.json":     {"name": ".json"},
		"/v1.2/x":               {"major": "1", "minor": "2"},
		"/v1.2.3/x":             {"major": "1.2", "minor": "3"},
		"/files/\x8f\xff.json":  {"name": "\x8f\xff"}, // bytes, not runes
		"/files/caf\u00e9.json": {"name": "caf\u00e9"},
	} {
		m, err := b.MatchHTTP(context.Background(), get("GET", p), nil)
		if err != nil || !maps.Equal(m.Params, want) {
			t.Errorf("%s: %v, %v; want %v", p, m, err, want)
		}
	}
	for _, p := range []string{"/files/.json", "/files/a/b.json", "/files/a;b.json", "/v.1/x", "/v1./x"} {
		if m, err := b.MatchHTTP(context.Background(), get("GET", p), nil); err == nil {
			t.Errorf("%s matched %v", p, m.Params)
		}
	}
}

func TestHandBuiltTemplateWithRawOnly(t *testing.T) {
	b := httpTable(t, &config.Route{When: []config.Condition{{Method: "GET", Path: &config.PathTemplate{Raw: "/r/{id}"}}}, With: fetch("r")})
	m, err := b.MatchHTTP(context.Background(), get("GET", "/r/1"), nil)
	if err != nil || m.Params["id"] != "1" {
		t.Fatal(m, err)
	}
}

func TestSplitPath(t *testing.T) {
	for in, want := range map[string][2]string{
		"/a?b=c":  {"/a", "b=c"},
		"/a":      {"/a", ""},
		"/a?":     {"/a", ""},
		"/a?b?c":  {"/a", "b?c"},
		"?x":      {"", "x"},
		"/a;b?c=": {"/a;b", "c="},
	} {
		p, q := SplitPath(in)
		if p != want[0] || q != want[1] {
			t.Errorf("SplitPath(%q) = %q, %q", in, p, q)
		}
	}
}

func TestGRPCMatching(t *testing.T) {
	b := grpcTable(t,
		&config.Route{When: []config.Condition{{GRPCMethod: "example.Echo/Unary"}}, With: produce("echo")},
		&config.Route{When: []config.Condition{{GRPCMethod: "example.Fetch/*"}}, With: fetch("events")},
		&config.Route{When: []config.Condition{{Service: "example.Tenant", Metadata: []config.MetadataMatch{
			{Name: "tenant", Value: []byte("acme")},
			{Name: "token-bin", Value: []byte{0x00, 0xff, 0x10}, Binary: true},
		}}}, With: produce("tenant")},
		&config.Route{When: []config.Condition{{Service: "example.Tenant"}, {GRPCMethod: "other.S/M"}}, With: produce("fallback")},
	)
	bin := "AP8Q" // base64 of 00 ff 10, unpadded as gRPC sends it
	for _, tc := range []struct {
		path    string
		headers Headers
		route   int
		cond    int
	}{
		{"/example.Echo/Unary", nil, 0, 0},
		{"/example.Echo/Other", nil, -1, 0},
		{"/example.Fetch/Anything", nil, 1, 0},
		{"/example.Tenant/Do", Headers{{"tenant", "acme"}, {"token-bin", bin}}, 2, 0},
		{"/example.Tenant/Do", Headers{{"tenant", "acme"}, {"token-bin", bin + "="}}, 2, 0},                      // padded
		{"/example.Tenant/Do", Headers{{"tenant", "x"}, {"tenant", "acme"}, {"token-bin", "Zm9v," + bin}}, 2, 0}, // any value
		{"/example.Tenant/Do", Headers{{"tenant", "acme"}}, 3, 0},                                                // absent entry: not route 2
		{"/example.Tenant/Do", Headers{{"tenant", "ACME"}, {"token-bin", bin}}, 3, 0},                            // values compared exactly
		{"/example.Tenant/Do", Headers{{"tenant", "acme"}, {"token-bin", "AP8R"}}, 3, 0},                         // other bytes
		{"/example.Tenant/Do", Headers{{"tenant", "acme"}, {"token-bin", "!!"}}, 3, 0},                           // undecodable
		{"/other.S/M", nil, 3, 1},
		{"/other.S/N", nil, -1, 0},
	} {
		svc, method, ok := ParseGRPCPath(tc.path)
		if !ok {
			t.Fatalf("ParseGRPCPath(%q)", tc.path)
		}
		m, err := b.MatchGRPC(context.Background(), &GRPCRequest{Service: svc, Method: method, Headers: tc.headers}, nil)
		if tc.route < 0 {
			if !errors.Is(err, ErrNoRoute) {
				t.Errorf("%s: %v, %v; want no route", tc.path, m, err)
			}
			continue
		}
		if err != nil || m.Route.Index != tc.route || m.Condition != tc.cond {
			t.Errorf("%s %v: %+v, %v; want route %d cond %d", tc.path, tc.headers, m, err, tc.route, tc.cond)
		}
	}
}

func TestGRPCStringValueOnBinHeader(t *testing.T) {
	b := grpcTable(t, &config.Route{When: []config.Condition{{Metadata: []config.MetadataMatch{{Name: "x-bin", Value: []byte("hi")}}}}, With: produce("p")})
	if _, err := b.MatchGRPC(context.Background(), &GRPCRequest{Service: "s", Method: "m", Headers: Headers{{"x-bin", "aGk"}}}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestParseGRPCPath(t *testing.T) {
	for in, want := range map[string][2]string{
		"/pkg.S/M":        {"pkg.S", "M"},
		"/a.b.c.Svc/Meth": {"a.b.c.Svc", "Meth"},
		"/x/y/z":          {"x/y", "z"},
	} {
		s, m, ok := ParseGRPCPath(in)
		if !ok || s != want[0] || m != want[1] {
			t.Errorf("ParseGRPCPath(%q) = %q %q %v", in, s, m, ok)
		}
	}
	for _, in := range []string{"", "/", "//", "/S/", "pkg.S/M", "/M", "//M"} {
		if s, m, ok := ParseGRPCPath(in); ok {
			t.Errorf("ParseGRPCPath(%q) = %q %q", in, s, m)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	if _, err := Build(nil); err == nil {
		t.Error("nil config")
	}
	if _, err := Build(&config.Config{Bindings: []*config.Binding{{Name: "k", Type: "kafka"}}}); err == nil {
		t.Error("unknown type")
	}
	bad := &config.Config{Bindings: []*config.Binding{{Name: "g", Type: config.GRPCKafka, Routes: []*config.Route{{When: []config.Condition{{GRPCMethod: "NoSlash"}}}}}}}
	if _, err := Build(bad); err == nil {
		t.Error("bad gRPC method pattern")
	}
	dup := &config.Config{Bindings: []*config.Binding{{Name: "a", Type: config.HTTPKafka}, {Name: "a", Type: config.GRPCKafka}}}
	if _, err := Build(dup); err == nil {
		t.Error("duplicate names")
	}
}

func TestTableLookups(t *testing.T) {
	cfg := &config.Config{Bindings: []*config.Binding{
		{Name: "h1", Type: config.HTTPKafka}, {Name: "g1", Type: config.GRPCKafka}, {Name: "h2", Type: config.HTTPKafka},
	}}
	tbl, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Config() != cfg || tbl.Binding("g1").Config.Name != "g1" || tbl.Binding("zz") != nil {
		t.Fatal("lookups")
	}
	hs := tbl.OfType(config.HTTPKafka)
	if len(hs) != 2 || hs[0].Config.Name != "h1" || hs[1].Config.Name != "h2" {
		t.Fatal("OfType keeps file order")
	}
	// Every exchange without a binding in its metadata asks: no allocation.
	if n := testing.AllocsPerRun(100, func() { _ = tbl.OfType(config.GRPCKafka) }); n != 0 {
		t.Errorf("OfType: %v allocations, want 0", n)
	}
}

// fakeGuards grants identities per guard name; absent guards fail.
type fakeGuards struct {
	ids   map[string]Identity
	calls map[string]int
}

func (f *fakeGuards) Check(_ context.Context, guard string, h Headers, _ map[string]*structpb.Struct) (Identity, error) {
	f.calls[guard]++
	if h.Get("authorization") == "" {
		return Identity{}, errors.New("no bearer token")
	}
	id, ok := f.ids[guard]
	if !ok {
		return Identity{}, fmt.Errorf("token not valid for %s", guard)
	}
	return id, nil
}

func TestGuards(t *testing.T) {
	b := httpTable(t,
		&config.Route{Guarded: []config.GuardRequirement{{Guard: "jwt0", Roles: []string{"write:items"}}},
			When: []config.Condition{{Method: "POST", Path: path(t, "/items")}}, With: produce("w")},
		&config.Route{Guarded: []config.GuardRequirement{{Guard: "jwt0", Roles: []string{"read:items"}}, {Guard: "jwt1"}},
			When: []config.Condition{{Path: path(t, "/items")}}, With: produce("r")},
		&config.Route{When: []config.Condition{{Method: "GET", Path: path(t, "/public")}}, With: fetch("p")},
		&config.Route{Guarded: []config.GuardRequirement{{Guard: "jwt1", Roles: []string{"admin"}}},
			When: []config.Condition{{Method: "DELETE", Path: path(t, "/items")}}, With: produce("d")},
	)
	auth := Headers{{"authorization", "Bearer x"}}
	ctx := context.Background()

	t.Run("roles granted", func(t *testing.T) {
		g := &fakeGuards{ids: map[string]Identity{"jwt0": {Subject: "alice", Roles: []string{"write:items", "read:items"}}}, calls: map[string]int{}}
		m, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "POST", Path: "/items", Headers: auth}, g)
		if err != nil || m.Route.Index != 0 || m.Identities["jwt0"].Subject != "alice" {
			t.Fatal(m, err)
		}
	})
	t.Run("skipped for roles, next route taken", func(t *testing.T) {
		g := &fakeGuards{ids: map[string]Identity{"jwt0": {Subject: "bob", Roles: []string{"read:items"}}, "jwt1": {Subject: "bob1"}}, calls: map[string]int{}}
		m, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "POST", Path: "/items", Headers: auth}, g)
		if err != nil || m.Route.Index != 1 {
			t.Fatal(m, err)
		}
		if len(m.Identities) != 2 || m.Identities["jwt1"].Subject != "bob1" {
			t.Fatalf("identities of every guard: %v", m.Identities)
		}
		if g.calls["jwt0"] != 1 {
			t.Fatalf("jwt0 checked %d times; once per request", g.calls["jwt0"])
		}
	})
	t.Run("only roles missing: 403", func(t *testing.T) {
		g := &fakeGuards{ids: map[string]Identity{"jwt0": {Subject: "eve"}, "jwt1": {Subject: "eve"}}, calls: map[string]int{}}
		_, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "DELETE", Path: "/items", Headers: auth}, g)
		var ge *GuardError
		if !errors.As(err, &ge) || !ge.Forbidden || ge.Guard != "jwt0" || len(ge.Missing) != 1 || ge.Missing[0] != "read:items" {
			t.Fatalf("%v (%+v)", err, ge)
		}
	})
	t.Run("a guard failed: 401 even if another lacked roles", func(t *testing.T) {
		// Route 0 lacks write:items (403); route 1 passes jwt0 but not jwt1 (401).
		g := &fakeGuards{ids: map[string]Identity{"jwt0": {Subject: "eve", Roles: []string{"read:items"}}}, calls: map[string]int{}}
		_, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "POST", Path: "/items", Headers: auth}, g)
		var ge *GuardError
		if !errors.As(err, &ge) || ge.Forbidden || ge.Guard != "jwt1" {
			t.Fatalf("%v", err)
		}
	})
	t.Run("no token: 401", func(t *testing.T) {
		g := &fakeGuards{calls: map[string]int{}}
		_, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "GET", Path: "/items"}, g)
		var ge *GuardError
		if !errors.As(err, &ge) || ge.Forbidden || ge.Err == nil {
			t.Fatalf("%v", err)
		}
	})
	t.Run("unguarded route needs no check", func(t *testing.T) {
		g := &fakeGuards{calls: map[string]int{}}
		m, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "GET", Path: "/public"}, g)
		if err != nil || m.Route.Index != 2 || m.Identities != nil || len(g.calls) != 0 {
			t.Fatal(m, err, g.calls)
		}
	})
	t.Run("guards of non-matching routes are not checked", func(t *testing.T) {
		g := &fakeGuards{calls: map[string]int{}}
		if _, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "GET", Path: "/nothing"}, g); !errors.Is(err, ErrNoRoute) {
			t.Fatal(err)
		}
		if len(g.calls) != 0 {
			t.Fatal(g.calls)
		}
	})
	t.Run("nil checker: guarded routes closed", func(t *testing.T) {
		_, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "POST", Path: "/items", Headers: auth}, nil)
		var ge *GuardError
		if !errors.As(err, &ge) || ge.Forbidden {
			t.Fatal(err)
		}
		if m, err := b.MatchHTTP(ctx, &HTTPRequest{Method: "GET", Path: "/public"}, nil); err != nil || m.Route.Index != 2 {
			t.Fatal(err)
		}
	})
	t.Run("gRPC", func(t *testing.T) {
		gb := grpcTable(t, &config.Route{Guarded: []config.GuardRequirement{{Guard: "jwt0", Roles: []string{"r"}}}, With: produce("x")})
		g := &fakeGuards{ids: map[string]Identity{"jwt0": {Subject: "s"}}, calls: map[string]int{}}
		_, err := gb.MatchGRPC(ctx, &GRPCRequest{Service: "a.B", Method: "C", Headers: auth}, g)
		var ge *GuardError
		if !errors.As(err, &ge) || !ge.Forbidden {
			t.Fatal(err)
		}
		g.ids["jwt0"] = Identity{Subject: "s", Roles: []string{"r"}}
		g.calls = map[string]int{}
		if m, err := gb.MatchGRPC(ctx, &GRPCRequest{Service: "a.B", Method: "C", Headers: auth}, g); err != nil || m.Identities["jwt0"].Subject != "s" {
			t.Fatal(err)
		}
	})
}

func TestHeaders(t *testing.T) {
	h := Headers{{"a", "1"}, {"b", "2"}, {"a", "3"}}
	if h.Get("a") != "1" || h.Get("z") != "" {
		t.Fatal("Get")
	}
	if v, ok := h.Lookup("b"); !ok || v != "2" {
		t.Fatal("Lookup")
	}
	if _, ok := h.Lookup("z"); ok {
		t.Fatal("Lookup absent")
	}
	if vs := h.Values("a"); len(vs) != 2 || vs[1] != "3" {
		t.Fatal("Values")
	}
}

// Every route of a table has its own ordinal, counted over the bindings in
// order, and a match carries its route's, HTTP and gRPC alike.
func TestMatchOrdinals(t *testing.T) {
	tbl, err := Build(&config.Config{Bindings: []*config.Binding{
		{Name: "http0", Type: config.HTTPKafka, Routes: []*config.Route{
			{Index: 0, When: []config.Condition{{Method: "GET", Path: path(t, "/a/{id}")}}, With: fetch("a")},
			{Index: 1, When: []config.Condition{{Method: "GET", Path: path(t, "/b/{id}")}}, With: fetch("b")},
		}},
		{Name: "grpc0", Type: config.GRPCKafka, Routes: []*config.Route{
			{Index: 0, When: []config.Condition{{Service: "example.A"}}, With: produce("ga")},
			{Index: 1, When: []config.Condition{{Service: "example.B"}}, With: produce("gb")},
		}},
		{Name: "http1", Type: config.HTTPKafka, Routes: []*config.Route{
			{Index: 0, When: []config.Condition{{Method: "GET", Path: path(t, "/c")}}, With: fetch("c")},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Routes() != 5 {
		t.Fatalf("Routes() = %d, want 5", tbl.Routes())
	}
	byOrdinal := map[int]*config.Route{}
	for _, b := range tbl.bindings {
		b.EachRoute(func(ordinal int, r *config.Route) {
			if prev, dup := byOrdinal[ordinal]; dup || ordinal < 0 || ordinal >= tbl.Routes() {
				t.Errorf("ordinal %d of %s route %d: out of range or also %v", ordinal, b.Config.Name, r.Index, prev)
			}
			byOrdinal[ordinal] = r
		})
	}
	for _, c := range []struct {
		binding, path string
		want          int
	}{{"http0", "/a/1", 0}, {"http0", "/b/1", 1}, {"http1", "/c", 4}} {
		m, err := tbl.Binding(c.binding).MatchHTTP(context.Background(), get("GET", c.path), nil)
		if err != nil || m.Ordinal != c.want || byOrdinal[m.Ordinal] != m.Route {
			t.Errorf("%s GET %s: %+v, %v; want ordinal %d", c.binding, c.path, m, err, c.want)
		}
	}
	for svc, want := range map[string]int{"example.A": 2, "example.B": 3} {
		m, err := tbl.Binding("grpc0").MatchGRPC(context.Background(), &GRPCRequest{Service: svc, Method: "M"}, nil)
		if err != nil || m.Ordinal != want || byOrdinal[m.Ordinal] != m.Route {
			t.Errorf("gRPC %s: %+v, %v; want ordinal %d", svc, m, err, want)
		}
	}
}
