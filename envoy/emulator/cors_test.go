package emulator

import (
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

// corsSettings is the shipped envoy.yaml with its CORS route and filter
// uncommented, loaded the real way.
func corsSettings(t *testing.T) envoy.Settings {
	t.Helper()
	data, err := os.ReadFile("../envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y, err := envoy.Uncommented(data, "cors-route", "cors-filter")
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoy.Parse(y)
	if err != nil {
		t.Fatal(err)
	}
	s, err := envoy.SettingsFrom(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// answering is a processor that answers every request 204 with an etag.
func answering(t *testing.T) *procServer {
	return startProcessor(t, func(ps *procStream) error {
		ps.next()
		return ps.send(extproctest.Immediate(204, "", nil, extproctest.SetHeaders("etag", `"1"`)))
	})
}

func do(t *testing.T, c *http.Client, method, url string, kv ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// A preflight from an allowed origin is answered by the CORS filter with
// 200 and the policy's access-control-* headers; the processor never sees
// it. One from another origin is passed on (forward_not_matching_preflights
// defaults to true) and gets no access-control-allow-origin.
func TestCORSPreflight(t *testing.T) {
	p := answering(t)
	addr := startEmulator(t, corsSettings(t), p.addr)
	for name, c := range map[string]*http.Client{"h1": h1Client(t), "h2c": h2cClient(t)} {
		resp := do(t, c, "OPTIONS", "http://"+addr+"/items/2", "origin", "https://app.example.com",
			"access-control-request-method", "PUT", "access-control-request-headers", "content-type")
		want := map[string]string{
			"access-control-allow-origin":  "https://app.example.com",
			"access-control-allow-methods": "GET, HEAD, POST, PUT, PATCH, DELETE",
			"access-control-allow-headers": "content-type, idempotency-key, if-none-match, if-match, prefer, authorization",
			"access-control-max-age":       "600",
			"server":                       "envoy",
		}
		if resp.StatusCode != 200 {
			t.Errorf("%s: preflight %d, want 200", name, resp.StatusCode)
		}
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: %s %q, want %q", name, k, got, v)
			}
		}
		for _, k := range []string{"access-control-allow-credentials", "access-control-expose-headers", "etag"} {
			if got, ok := resp.Header[http.CanonicalHeaderKey(k)]; ok {
				t.Errorf("%s: %s %q, want none", name, k, got)
			}
		}
	}
	if n := len(p.streams); n != 0 {
		t.Fatalf("%d Process streams for preflights Envoy answers itself", n)
	}

	resp := do(t, h1Client(t), "OPTIONS", "http://"+addr+"/items/2", "origin", "https://evil.example",
		"access-control-request-method", "PUT")
	if resp.StatusCode != 204 || resp.Header.Get("etag") != `"1"` || resp.Header.Get("access-control-allow-origin") != "" {
		t.Errorf("preflight from another origin: %d %v, want the processor's 204 without access-control-*", resp.StatusCode, resp.Header)
	}
	p.stream(t)
}

// An actual request from an allowed origin gets access-control-allow-origin
// and -expose-headers on the processor's answer, immediate or streamed; a
// request from another origin or with none gets neither.
func TestCORSActualRequest(t *testing.T) {
	immediateP := answering(t)
	s := corsSettings(t)
	addr := startEmulator(t, s, immediateP.addr)
	const expose = "etag, location, preference-applied, retry-after"
	for _, m := range []string{"GET", "PUT"} {
		resp := do(t, h1Client(t), m, "http://"+addr+"/items/2", "origin", "https://app.example.com")
		if resp.StatusCode != 204 || resp.Header.Get("access-control-allow-origin") != "https://app.example.com" ||
			resp.Header.Get("access-control-expose-headers") != expose || resp.Header.Get("etag") != `"1"` {
			t.Errorf("%s: %d %v, want the processor's 204 with allow-origin and expose-headers", m, resp.StatusCode, resp.Header)
		}
	}
	for _, origin := range []string{"https://evil.example", ""} {
		resp := do(t, h1Client(t), "GET", "http://"+addr+"/items/2", "origin", origin)
		if resp.StatusCode != 204 || resp.Header.Get("access-control-allow-origin") != "" || resp.Header.Get("access-control-expose-headers") != "" {
			t.Errorf("origin %q: %d %v, want no access-control-*", origin, resp.StatusCode, resp.Header)
		}
	}

	streamed := startProcessor(t, func(ps *procStream) error {
		ps.next()
		if err := ps.send(extproctest.StreamedHeaders(false, ":status", "200", "access-control-allow-origin", "*")); err != nil {
			return err
		}
		return ps.send(extproctest.StreamedBody([]byte("x"), true))
	})
	addr = startEmulator(t, s, streamed.addr)
	resp := do(t, h2cClient(t), "GET", "http://"+addr+"/items/2", "origin", "https://app.example.com")
	if resp.StatusCode != 200 || resp.Header.Values("access-control-allow-origin")[0] != "https://app.example.com" ||
		len(resp.Header.Values("access-control-allow-origin")) != 1 {
		t.Errorf("streamed: %d %v, want the filter's allow-origin replacing the processor's", resp.StatusCode, resp.Header)
	}
}

// The filter acts only on routes with a route action and a policy: with the
// policy on the direct_response route, or no CORS filter, the preflight
// reaches the processor.
func TestCORSOnlyOnRoutesWithPolicy(t *testing.T) {
	s := corsSettings(t)
	var policy *envoy.CORSPolicy
	for _, r := range s.Routes {
		if r.CORS != nil {
			policy = r.CORS
		}
	}
	if policy == nil {
		t.Fatal("no route of the uncommented envoy.yaml has a CORS policy")
	}
	onDirect := baseSettings()
	onDirect.Routes[1].CORS = policy
	b, err := envoy.Load("../envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	noFilter, err := envoy.SettingsFrom(b)
	if err != nil {
		t.Fatal(err)
	}
	for name, settings := range map[string]envoy.Settings{"policy on direct_response": onDirect, "shipped, no filter": noFilter} {
		p := answering(t)
		addr := startEmulator(t, settings, p.addr)
		resp := do(t, h1Client(t), "OPTIONS", "http://"+addr+"/items/2", "origin", "https://app.example.com",
			"access-control-request-method", "PUT")
		if resp.StatusCode != 204 || resp.Header.Get("access-control-allow-origin") != "" {
			t.Errorf("%s: %d %v, want the processor's 204 without access-control-*", name, resp.StatusCode, resp.Header)
		}
		p.stream(t)
	}
}

// The policy's fields shape the answers as cors_filter.cc does: matcher
// kinds, "*" origins, "*" methods and headers echoing the request,
// credentials, private network access, and unmatched preflights kept when
// forward_not_matching_preflights is false.
func TestCORSPolicyRules(t *testing.T) {
	routes := []envoy.Route{
		{Name: "star", Prefix: "/star", Cluster: "c", CORS: &envoy.CORSPolicy{
			AllowOrigins: []envoy.StringMatch{{Exact: "*"}}, AllowMethods: "*", AllowHeaders: "*",
			AllowCredentials: true, AllowPrivateNetworkAccess: true, ForwardNotMatchingPreflights: true,
		}},
		{Name: "kinds", Prefix: "/kinds", Cluster: "c", CORS: &envoy.CORSPolicy{
			AllowOrigins: []envoy.StringMatch{{Prefix: "https://a."}, {Suffix: ".B.example", IgnoreCase: true},
				{Contains: "-c-"}, {Regex: `https://d[0-9]+\.example`}},
			ExposeHeaders: "etag",
		}},
	}
	cors, err := compileCORS(routes)
	if err != nil {
		t.Fatal(err)
	}
	e := &Emulator{cors: cors}
	pre := func(origin string) Headers {
		return Headers{{":method", "OPTIONS"}, {"origin", origin}, {"access-control-request-method", "DELETE"},
			{"access-control-request-headers", "x-a, x-b"}, {"access-control-request-private-network", "true"}}
	}
	rep, add := e.corsDecode(pre("https://anything.example"), &routes[0])
	want := Headers{{"access-control-allow-origin", "https://anything.example"}, {"access-control-allow-credentials", "true"},
		{"access-control-allow-methods", "DELETE"}, {"access-control-allow-headers", "x-a, x-b"},
		{"access-control-allow-private-network", "true"}}
	if rep == nil || rep.Status != 200 || len(rep.Body) != 0 || !reflect.DeepEqual(rep.Headers, want) || add != nil {
		t.Errorf("star preflight: %+v %v, want 200 with %v", rep, add, want)
	}
	for origin, ok := range map[string]bool{
		"https://a.example": true, "https://x.b.EXAMPLE": true, "https://x-c-y": true, "https://d42.example": true,
		"https://d42.example.evil": false, "http://a.example": false, "https://b.example.org": false,
	} {
		rep, add := e.corsDecode(Headers{{":method", "GET"}, {"origin", origin}}, &routes[1])
		wantAdd := Headers(nil)
		if ok {
			wantAdd = Headers{{"access-control-allow-origin", origin}, {"access-control-expose-headers", "etag"}}
		}
		if rep != nil || !reflect.DeepEqual(add, wantAdd) {
			t.Errorf("GET from %s: %+v %v, want %v", origin, rep, add, wantAdd)
		}
		// forward_not_matching_preflights false: the filter answers an
		// unmatched preflight too, without access-control-allow-origin.
		rep, _ = e.corsDecode(pre(origin), &routes[1])
		if rep == nil || rep.Status != 200 {
			t.Fatalf("preflight from %s: %+v, want the filter's 200", origin, rep)
		}
		if _, has := rep.Headers.Get("access-control-allow-origin"); has != ok {
			t.Errorf("preflight from %s: allow-origin present %v, want %v", origin, has, ok)
		}
	}
	if _, err := compileCORS([]envoy.Route{{Name: "bad", CORS: &envoy.CORSPolicy{AllowOrigins: []envoy.StringMatch{{Regex: "("}}}}}); err == nil ||
		!strings.Contains(err.Error(), `route 0 ("bad"): CORS allow_origin_string_match`) {
		t.Errorf("bad regex: %v, want an error naming the route", err)
	}
}
