package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/guard"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// guardConfig guards routes of both bindings with two jwt guards: jwt0
// (audience api, roles from scope) and ops (audience ops, roles from the
// groups array). JWKS is replaced by the issuer's key set.
const guardConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - guarded: { jwt0: ["read:items"] }                         # 0
        when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - guarded: { jwt0: [admin] }                                # 1: admins see the full document
        when: [{ method: GET, path: "/docs/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: docs-admin, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/docs/{id}" }]               # 2: everyone else the public one
        exit: kafka0
        with: { capability: fetch, topic: docs-public, filters: [{ key: "${params.id}" }] }
      - guarded: { jwt0: ["read:items"], ops: [ops] }             # 3: both guards
        when: [{ method: GET, path: "/ops/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - guarded: { jwt0: [] }                                     # 4: the caller's own records
        when: [{ method: GET, path: /mine }]
        exit: kafka0
        with:
          capability: fetch
          topic: items
          filters: [{ headers: { owner: "${guarded['jwt0'].identity}" } }]
          merge: { content-type: application/json }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - guarded: { jwt0: ["write:items"] }                        # 0
        when: [{ method: example.v1.Items/Put }]
        exit: kafka0
        with: { capability: produce, topic: item-commands, reply-to: item-replies }
      - guarded: { jwt0: [admin] }                                # 1
        when: [{ method: example.v1.Docs/Get }]
        exit: kafka0
        with: { capability: fetch, topic: docs-admin }
      - when: [{ method: example.v1.Docs/Get }]                   # 2
        exit: kafka0
        with: { capability: fetch, topic: docs-public }
      - guarded: { jwt0: ["read:items"], ops: [ops] }             # 3
        when: [{ method: example.v1.Ops/Run }]
        exit: kafka0
        with: { capability: produce, topic: item-commands, reply-to: item-replies }
guards:
  jwt0:
    type: jwt
    options: { issuer: "https://auth.example.com", audience: "https://api.example.com", keys: 'JWKS' }
  ops:
    type: jwt
    options: { issuer: "https://auth.example.com", audience: "https://ops.example.com", roles-claim: groups, keys: 'JWKS' }
`

// refusals are the tokens every guard must refuse (401), with a part of the
// detail that says why.
func refusals(is *issuer) []struct{ name, token, detail string } {
	now := time.Now()
	return []struct{ name, token, detail string }{
		{"expired", is.token("exp", now.Add(-time.Hour).Unix()), "the token expired at"},
		{"not yet valid", is.token("nbf", now.Add(time.Hour).Unix()), "the token is not valid before"},
		{"wrong issuer", is.token("iss", "https://evil.example.com"), `issuer "https://evil.example.com" is not accepted`},
		{"wrong audience", is.token("aud", "https://other.example.com"), `does not include "https://api.example.com"`},
		{"bad signature", is.signWith(is.forger, is.claims("scope", "read:items admin")), "RS256 signature does not verify"},
		{"alg none", is.unsigned(), `algorithm "none" is not accepted`},
		{"HMAC with the RSA public key", is.hmacWithPublicKey(), `algorithm "HS256" is not accepted`},
		{"garbage", "not-a-jwt", "not a signed JWT"},
		{"missing", "", "no authorization header"},
	}
}

func startGuarded(t *testing.T, spy *guardSpy) (*env, *issuer) {
	t.Helper()
	is := newIssuer(t)
	e := startEnv(t, strings.ReplaceAll(guardConfig, "'JWKS'", "'"+is.jwks()+"'"), withGuards(t), spying(spy))
	return e, is
}

// auth is the authorization header pair for a token ("" = none).
func auth(token string) []string {
	if token == "" {
		return nil
	}
	return []string{"authorization", "Bearer " + token}
}

func TestGuardsHTTP(t *testing.T) {
	t.Parallel()
	spy := &guardSpy{}
	e, is := startGuarded(t, spy)
	e.put("items", 0, "1", []byte(`{"n":"one"}`), "content-type", "application/json", "owner", "alice")
	e.put("items", 0, "2", []byte(`{"n":"two"}`), "content-type", "application/json", "owner", "bob")
	e.put("docs-admin", 0, "d", []byte("admin doc"), "content-type", "text/plain")
	e.put("docs-public", 0, "d", []byte("public doc"), "content-type", "text/plain")

	reader := is.token()
	// The views read the records shortly after their acknowledgement:
	// long-poll for them rather than guess when.
	for _, p := range []string{"/items/2", "/docs/d"} {
		if resp, body := e.request(e.h1, "GET", p, "", append(auth(is.token("scope", "read:items admin")), "prefer", "wait=20")...); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", p, resp.StatusCode, body)
		}
	}
	if resp, body := e.request(e.h1, "GET", "/docs/d", "", "prefer", "wait=20"); resp.StatusCode != 200 || body != "public doc" {
		t.Fatalf("GET /docs/d: %d %s", resp.StatusCode, body)
	}
	spy.take()

	t.Run("valid token with the role reaches the handler", func(t *testing.T) {
		for _, c := range []*http.Client{e.h1, e.h2c} {
			resp, body := e.request(c, "GET", "/items/1", "", auth(reader)...)
			if resp.StatusCode != 200 || body != `{"n":"one"}` {
				t.Fatalf("HTTP/%d: %d %s", resp.ProtoMajor, resp.StatusCode, body)
			}
			spy.one(t, "GET /items/1", 0, "jwt0", "alice")
		}
		// Roles from an array claim: the ops guard reads groups.
		resp, body := e.request(e.h1, "GET", "/ops/1", "", auth(is.token("aud", []string{guardAudience, guardOpsAudience}, "groups", []string{"ops"}))...)
		if resp.StatusCode != 200 || body != `{"n":"one"}` {
			t.Fatalf("GET /ops/1: %d %s", resp.StatusCode, body)
		}
		spy.one(t, "GET /ops/1", 3, "ops", "alice")
	})

	t.Run("invalid or missing credentials: 401", func(t *testing.T) {
		for _, r := range refusals(is) {
			for _, c := range []*http.Client{e.h1, e.h2c} {
				resp, body := e.request(c, "GET", "/items/1", "", auth(r.token)...)
				if resp.StatusCode != 401 || resp.Header.Get("www-authenticate") != "Bearer" || resp.Header.Get("content-type") != "application/problem+json" {
					t.Errorf("%s, HTTP/%d: %d %v %s", r.name, resp.ProtoMajor, resp.StatusCode, resp.Header, body)
					continue
				}
				if d := problemDetail(t, body); !strings.Contains(d, r.detail) || !strings.Contains(d, `guard "jwt0"`) {
					t.Errorf("%s: detail %q, want it to contain %q", r.name, d, r.detail)
				}
				if r.token != "" && strings.Contains(body, r.token) {
					t.Errorf("%s: the answer echoes the token", r.name)
				}
			}
			spy.none(t, r.name)
		}
	})

	t.Run("missing role: 403", func(t *testing.T) {
		resp, body := e.request(e.h1, "GET", "/items/1", "", auth(is.token("scope", "write:items"))...)
		if resp.StatusCode != 403 || resp.Header.Get("www-authenticate") != "" {
			t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
		}
		if d := problemDetail(t, body); !strings.Contains(d, "read:items") || !strings.Contains(d, `guard "jwt0"`) {
			t.Errorf("detail %q", d)
		}
		// No roles at all.
		if resp, _ := e.request(e.h1, "GET", "/items/1", "", auth(is.token("scope", nil))...); resp.StatusCode != 403 {
			t.Errorf("no scope: %d", resp.StatusCode)
		}
		spy.none(t, "missing role")
	})

	t.Run("a guarded and an unguarded route on one path pick by roles", func(t *testing.T) {
		resp, body := e.request(e.h1, "GET", "/docs/d", "", auth(is.token("scope", "admin"))...)
		if resp.StatusCode != 200 || body != "admin doc" {
			t.Errorf("admin: %d %s", resp.StatusCode, body)
		}
		spy.one(t, "admin", 1, "jwt0", "alice")
		for _, tc := range []struct{ name, token string }{
			{"reader", reader}, {"no token", ""}, {"expired admin", is.token("scope", "admin", "exp", time.Now().Add(-time.Hour).Unix())},
			{"forged admin", is.hmacWithPublicKey()},
		} {
			resp, body := e.request(e.h1, "GET", "/docs/d", "", auth(tc.token)...)
			if resp.StatusCode != 200 || body != "public doc" {
				t.Errorf("%s: %d %s", tc.name, resp.StatusCode, body)
			}
			spy.one(t, tc.name, 2, "", "")
		}
	})

	t.Run("two guards ANDed", func(t *testing.T) {
		both := []string{guardAudience, guardOpsAudience}
		for _, tc := range []struct {
			name   string
			token  string
			status int
			detail string
		}{
			{"ops guard refuses the audience", is.token("groups", []string{"ops"}), 401, `guard "ops": the token's audience ["https://api.example.com"] does not include "https://ops.example.com"`},
			{"jwt0 refuses the audience", is.token("aud", guardOpsAudience, "groups", []string{"ops"}), 401, `guard "jwt0"`},
			{"ops role missing", is.token("aud", both), 403, `role(s) ops required by guard "ops"`},
			{"jwt0 role missing", is.token("aud", both, "scope", "other", "groups", []string{"ops"}), 403, `role(s) read:items required by guard "jwt0"`},
		} {
			resp, body := e.request(e.h1, "GET", "/ops/1", "", auth(tc.token)...)
			if resp.StatusCode != tc.status || !strings.Contains(problemDetail(t, body), tc.detail) {
				t.Errorf("%s: %d %s, want %d with %q", tc.name, resp.StatusCode, body, tc.status, tc.detail)
			}
		}
		spy.none(t, "ANDed refusals")
	})

	t.Run("identity in a filter", func(t *testing.T) {
		resp, body := e.request(e.h1, "GET", "/mine", "", auth(reader)...)
		if resp.StatusCode != 200 || body != `[{"n":"one"}]` {
			t.Errorf("alice: %d %s", resp.StatusCode, body)
		}
		resp, body = e.request(e.h1, "GET", "/mine", "", auth(is.token("sub", "bob"))...)
		if resp.StatusCode != 200 || body != `[{"n":"two"}]` {
			t.Errorf("bob: %d %s", resp.StatusCode, body)
		}
		spy.take()
	})
}

func TestGuardsGRPC(t *testing.T) {
	t.Parallel()
	spy := &guardSpy{}
	e, is := startGuarded(t, spy)
	conn := e.grpcConn()
	call := func(method, token string) (metadata.MD, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		var trailer metadata.MD
		err := conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Trailer(&trailer))
		return trailer, err
	}
	writer := is.token("scope", "write:items")

	t.Run("valid token with the role reaches the handler", func(t *testing.T) {
		if _, err := call("/example.v1.Items/Put", writer); err != nil {
			t.Fatal(err)
		}
		spy.one(t, "Items/Put", 0, "jwt0", "alice")
	})

	t.Run("invalid or missing credentials: UNAUTHENTICATED", func(t *testing.T) {
		for _, r := range refusals(is) {
			tr, err := call("/example.v1.Items/Put", r.token)
			st := status.Convert(err)
			if st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), r.detail) {
				t.Errorf("%s: %v, want UNAUTHENTICATED with %q", r.name, err, r.detail)
			}
			if got := tr.Get("www-authenticate"); len(got) != 1 || got[0] != "Bearer" {
				t.Errorf("%s: www-authenticate %q", r.name, got)
			}
			if r.token != "" && strings.Contains(st.Message(), r.token) {
				t.Errorf("%s: the status echoes the token", r.name)
			}
		}
		spy.none(t, "refusals")
	})

	t.Run("missing role: PERMISSION_DENIED", func(t *testing.T) {
		_, err := call("/example.v1.Items/Put", is.token())
		if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "write:items") {
			t.Errorf("%v", err)
		}
		spy.none(t, "missing role")
	})

	t.Run("a guarded and an unguarded route pick by roles", func(t *testing.T) {
		if _, err := call("/example.v1.Docs/Get", is.token("scope", "admin")); err != nil {
			t.Fatal(err)
		}
		spy.one(t, "admin", 1, "jwt0", "alice")
		for _, tok := range []string{writer, "", is.unsigned()} {
			if _, err := call("/example.v1.Docs/Get", tok); err != nil {
				t.Fatal(err)
			}
			spy.one(t, fmt.Sprintf("token %.10q", tok), 2, "", "")
		}
	})

	t.Run("two guards ANDed", func(t *testing.T) {
		both := []string{guardAudience, guardOpsAudience}
		if _, err := call("/example.v1.Ops/Run", is.token("aud", both, "groups", []string{"ops"})); err != nil {
			t.Fatal(err)
		}
		spy.one(t, "both", 3, "ops", "alice")
		for _, tc := range []struct {
			token string
			code  codes.Code
		}{
			{is.token("groups", []string{"ops"}), codes.Unauthenticated},
			{is.token("aud", both), codes.PermissionDenied},
			{is.token("aud", both, "scope", "x", "groups", []string{"ops"}), codes.PermissionDenied},
		} {
			if _, err := call("/example.v1.Ops/Run", tc.token); status.Code(err) != tc.code {
				t.Errorf("%v, want %v", err, tc.code)
			}
		}
		spy.none(t, "ANDed refusals")
	})
}

// envoy-jwt: Envoy's jwt_authn verifies the token and ext_proc forwards its
// payload; here a stand-in for jwt_authn does that in front of the real
// processor, and removes the authorization header as jwt_authn does.
func TestEnvoyJWTGuard(t *testing.T) {
	t.Parallel()
	const cfg = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - guarded: { envoy: ["read:items"] }
        when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
guards:
  envoy: { type: envoy-jwt, options: { provider: jwt_payload } }
`
	spy := &guardSpy{}
	is := newIssuer(t)
	e := startEnv(t, cfg, withGuards(t), spying(spy))
	// Clients go through the jwt_authn stand-in.
	e.base = "http://" + jwtAuthnFront(t, e.dev.Processor.Addr(), is, "jwt_payload")
	e.put("items", 0, "1", []byte(`{"n":"one"}`), "content-type", "application/json")

	get := func(token string, hdr ...string) (*http.Response, string) {
		t.Helper()
		return e.request(e.h1, "GET", "/items/1", "", append(auth(token), hdr...)...)
	}
	if resp, body := get(is.token(), "prefer", "wait=20"); resp.StatusCode != 200 || body != `{"n":"one"}` {
		t.Fatalf("verified payload with the role: %d %s", resp.StatusCode, body)
	}
	spy.one(t, "payload present", 0, "envoy", "alice")

	for _, tc := range []struct {
		name, token string
		status      int
		detail      string
	}{
		{"no token: no payload", "", 401, `Envoy forwarded no verified token payload (jwt_authn payload_in_metadata "jwt_payload")`},
		{"a token jwt_authn refused: no payload", is.token("exp", time.Now().Add(-time.Hour).Unix()), 401, "no verified token payload"},
		{"payload without the role", is.token("scope", "other"), 403, `role(s) read:items required by guard "envoy"`},
	} {
		resp, body := get(tc.token)
		if resp.StatusCode != tc.status || !strings.Contains(problemDetail(t, body), tc.detail) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, resp.StatusCode, body, tc.status, tc.detail)
		}
	}
	spy.none(t, "refusals")
}

// The jwt_authn block that envoy/envoy.yaml ships commented out is valid
// once uncommented (it loads strictly, validates and passes the contract
// checks), sits before ext_proc, and writes the payload where the envoy-jwt
// guard of the docs reads it.
func TestShippedJWTAuthnBlock(t *testing.T) {
	t.Parallel()
	lines := strings.Split(string(envoy.DefaultYAML()), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "# - name: envoy.filters.http.jwt_authn" {
			start = i
		}
	}
	if start < 0 {
		t.Fatal("envoy.yaml has no commented jwt_authn filter")
	}
	commented := regexp.MustCompile(`^(\s*)# ?(.*)$`)
	for i := start; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "# "); i++ {
		m := commented.FindStringSubmatch(lines[i])
		lines[i] = m[1] + m[2]
	}
	yaml := []byte(strings.Join(lines, "\n"))
	boot, err := envoy.Parse(yaml)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoy.Validate(boot); err != nil {
		t.Fatal(err)
	}
	if err := envoy.Check(boot, envoy.CheckOptions{MaxWait: 60 * time.Second, ReplyTimeout: 30 * time.Second, PingMinTime: stack.KeepaliveMinTime}); err != nil {
		t.Fatal(err)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) != 3 || filters[0].GetName() != guard.JWTAuthnNamespace {
		t.Fatalf("filters %v, want jwt_authn, ext_proc, router", filters)
	}
	ja := &jwtv3.JwtAuthentication{}
	if err := filters[0].GetTypedConfig().UnmarshalTo(ja); err != nil {
		t.Fatal(err)
	}
	var provider string
	for _, p := range ja.GetProviders() {
		provider = p.GetPayloadInMetadata()
	}
	cfg, err := config.Parse("g.yaml", []byte(`
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0: { type: http-kafka, kind: proxy, routes: [{ guarded: { envoy: [] }, exit: kafka0, with: { capability: produce, topic: t } }] }
guards:
  envoy: { type: envoy-jwt, options: { provider: `+provider+` } }
`), nil)
	if err != nil || provider != "jwt_payload" {
		t.Fatalf("provider %q: %v", provider, err)
	}
	if _, err := guard.New(cfg); err != nil {
		t.Fatal(err)
	}
}
