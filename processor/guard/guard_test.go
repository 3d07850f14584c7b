package guard

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// The jwt guard of the tests: issuer, audience, the default algorithms (every
// asymmetric one) and the JWKS from the environment.
const jwtGuardYAML = `  jwt0:
    type: jwt
    options:
      issuer: https://auth.example.com
      audience: https://api.example.com
      keys: ${env:JWKS}
`

func TestJWTValid(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	c := checker(t, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(t, false)})
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"RS256", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now))},
		{"PS384", sign(t, jose.PS384, k.rsa, "r1", claimsAt(now))},
		{"ES256", sign(t, jose.ES256, k.ec, "e1", claimsAt(now))},
		{"EdDSA", sign(t, jose.EdDSA, k.ed, "d1", claimsAt(now))},
		{"no kid", sign(t, jose.RS256, k.rsa, "", claimsAt(now))},
		{"audience array", sign(t, jose.ES256, k.ec, "e1", claimsAt(now, "aud", []string{"other", testAudience}))},
		{"fractional dates", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "exp", float64(now.Unix())+3600.5, "nbf", float64(now.Unix())-0.25))},
		{"no nbf", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "nbf", nil))},
		{"expired within the skew", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "exp", now.Add(-10*time.Second).Unix()))},
		{"nbf within the skew", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "nbf", now.Add(10*time.Second).Unix()))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := c.Check(context.Background(), "jwt0", bearerHeaders(tc.token), nil)
			if err != nil {
				t.Fatal(err)
			}
			if id.Subject != "alice" || !slices.Equal(id.Roles, []string{"read:items", "write:items"}) {
				t.Fatalf("identity %+v", id)
			}
		})
	}
}

func TestJWTRefused(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	c := checker(t, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(t, false)})
	rsaPub, err := x509.MarshalPKIXPublicKey(k.rsa.Public())
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaPub})
	for _, tc := range []struct {
		name  string
		token string
		kind  error
		msg   string // part of the message
	}{
		{"expired", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "exp", now.Add(-time.Minute).Unix())),
			ErrExpired, "the token expired at " + now.Add(-time.Minute).UTC().Format(time.RFC3339)},
		{"not yet valid", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "nbf", now.Add(time.Minute).Unix())),
			ErrNotYetValid, "not valid before " + now.Add(time.Minute).UTC().Format(time.RFC3339)},
		{"no exp", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "exp", nil)), ErrClaims, "no exp claim"},
		{"exp not a number", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "exp", "tomorrow")), ErrClaims, "exp claim is not a number"},
		{"wrong issuer", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "iss", "https://evil.example.com")),
			ErrIssuer, `issuer "https://evil.example.com" is not accepted (want "https://auth.example.com")`},
		{"no issuer", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "iss", nil)), ErrIssuer, "no iss claim"},
		{"long issuer is shortened", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "iss", strings.Repeat("x", 500))), ErrIssuer, `"` + strings.Repeat("x", 64) + `"…`},
		{"wrong audience", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "aud", "https://other.example.com")),
			ErrAudience, `audience ["https://other.example.com"] does not include "https://api.example.com"`},
		{"audience array without ours", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "aud", []string{"a", "b", "c", "d", "e"})),
			ErrAudience, `["a", "b", "c", and 2 more]`},
		{"no audience", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "aud", nil)), ErrAudience, "no aud claim"},
		{"bad signature: another key under our kid", sign(t, jose.RS256, k.rsa2, "r1", claimsAt(now)),
			ErrSignature, `RS256 signature does not verify with the JWKS's RSA key for kid "r1"`},
		{"bad signature: another key, no kid", sign(t, jose.RS256, k.rsa2, "", claimsAt(now)),
			ErrSignature, "RS256 signature does not verify with any RSA key of the JWKS"},
		{"tampered payload", tamper(t, sign(t, jose.RS256, k.rsa, "r1", claimsAt(now)), claimsAt(now, "scope", "admin")),
			ErrSignature, "signature does not verify"},
		{"unknown kid", sign(t, jose.RS256, k.rsa, "nope", claimsAt(now)), ErrSignature, `no RSA key with kid "nope"`},
		{"kid of a key of another type", sign(t, jose.RS256, k.rsa, "e1", claimsAt(now)), ErrSignature, `no RSA key with kid "e1"`},
		{"alg none", raw(t, map[string]any{"alg": "none", "typ": "JWT"}, claimsAt(now), func(string) []byte { return nil }),
			ErrAlgorithm, `algorithm "none" is not accepted`},
		{"alg None", raw(t, map[string]any{"alg": "None"}, claimsAt(now), func(string) []byte { return nil }),
			ErrAlgorithm, `algorithm "None" is not accepted`},
		{"HMAC with the RSA public key (PEM) as secret", raw(t, map[string]any{"alg": "HS256", "kid": "r1"}, claimsAt(now), hs256(pubPEM)),
			ErrAlgorithm, `algorithm "HS256" is not accepted (accepted: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA)`},
		{"HMAC with the RSA public key (DER) as secret", raw(t, map[string]any{"alg": "HS256"}, claimsAt(now), hs256(rsaPub)),
			ErrAlgorithm, `algorithm "HS256" is not accepted`},
		{"ES256 header with the RSA key's kid", raw(t, map[string]any{"alg": "ES256", "kid": "r1"}, claimsAt(now), rs256(t, k.rsa)),
			ErrSignature, `no EC key with kid "r1"`},
		{"payload not an object", raw(t, map[string]any{"alg": "RS256", "kid": "r1"}, nil, rs256(t, k.rsa)),
			ErrMalformed, "payload is not a JSON object"},
		{"no sub", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "sub", nil)), ErrClaims, `no identity claim "sub"`},
		{"sub not a string", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "sub", 42)), ErrClaims, `identity claim "sub" is not a string`},
		{"scope not a string", sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "scope", 7)), ErrClaims, `roles claim "scope" is neither`},
		{"not a JWS", "abc.def", ErrMalformed, "not a signed JWT"},
		{"bad base64", "eyJhbGciOiJSUzI1NiJ9.!!!.abc", ErrMalformed, "not a signed JWT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Check(context.Background(), "jwt0", bearerHeaders(tc.token), nil)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to contain %q", err, tc.msg)
			}
			t.Log(err)
			assertNoToken(t, err.Error(), tc.token)
		})
	}
}

// tamper replaces a signed token's payload, keeping its signature.
func tamper(t *testing.T, token string, claims map[string]any) string {
	t.Helper()
	parts := strings.Split(token, ".")
	forged := raw(t, map[string]any{}, claims, func(string) []byte { return nil })
	return parts[0] + "." + strings.Split(forged, ".")[1] + "." + parts[2]
}

func TestBearerHeader(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	c := checker(t, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(t, false)})
	good := sign(t, jose.RS256, k.rsa, "r1", claimsAt(now))
	for _, tc := range []struct {
		name    string
		headers route.Headers
		kind    error
		msg     string
	}{
		{"missing", route.Headers{{Name: ":path", Value: "/"}}, ErrNoCredentials, "no authorization header"},
		{"basic", route.Headers{{Name: "authorization", Value: "Basic YWxpY2U6c2VjcmV0"}}, ErrMalformed, `scheme is "Basic", not Bearer`},
		{"no scheme", route.Headers{{Name: "authorization", Value: good}}, ErrMalformed, "not a Bearer token"},
		{"empty bearer", route.Headers{{Name: "authorization", Value: "Bearer"}}, ErrMalformed, "the Bearer token is empty"},
		{"bearer and spaces", route.Headers{{Name: "authorization", Value: "Bearer    "}}, ErrMalformed, "the Bearer token is empty"},
		{"two tokens", route.Headers{{Name: "authorization", Value: "Bearer " + good + " " + good}}, ErrMalformed, "whitespace"},
		{"two headers", route.Headers{{Name: "authorization", Value: "Bearer " + good}, {Name: "authorization", Value: "Bearer " + good}}, ErrMalformed, "2 authorization headers"},
		{"huge", route.Headers{{Name: "authorization", Value: "Bearer " + strings.Repeat("a", maxTokenBytes+1)}}, ErrMalformed, "at most 16384"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Check(context.Background(), "jwt0", tc.headers, nil)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.kind, tc.msg)
			}
			assertNoToken(t, err.Error(), good)
			if strings.Contains(err.Error(), "YWxpY2U6c2VjcmV0") {
				t.Errorf("the error echoes Basic credentials: %v", err)
			}
		})
	}
	for _, v := range []string{"bearer " + good, "BEARER  " + good, " Bearer " + good + " "} {
		if _, err := c.Check(context.Background(), "jwt0", route.Headers{{Name: "authorization", Value: v}}, nil); err != nil {
			t.Errorf("%.12q…: %v", v, err)
		}
	}
}

func TestHMACOnlyWhenConfigured(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	env := map[string]string{"JWKS": k.jwks(t, true)}
	hsToken := sign(t, jose.HS256, k.hmacKey, "h1", claimsAt(now))

	// The default algorithms never include HMAC, even with an oct key.
	def := checker(t, jwtGuardYAML, now, env)
	if _, err := def.Check(context.Background(), "jwt0", bearerHeaders(hsToken), nil); !errors.Is(err, ErrAlgorithm) {
		t.Fatalf("HS256 with default algorithms: %v", err)
	}

	withHS := checker(t, jwtGuardYAML+"      algorithms: [RS256, HS256]\n", now, env)
	if id, err := withHS.Check(context.Background(), "jwt0", bearerHeaders(hsToken), nil); err != nil || id.Subject != "alice" {
		t.Fatalf("HS256 configured: %+v %v", id, err)
	}
	wrong := sign(t, jose.HS256, []byte("another secret of thirty-two bytes!!"), "h1", claimsAt(now))
	if _, err := withHS.Check(context.Background(), "jwt0", bearerHeaders(wrong), nil); !errors.Is(err, ErrSignature) {
		t.Fatalf("HS256 with the wrong secret: %v", err)
	}
	// HS256 is accepted, but only oct keys verify it: the RSA public key is
	// never an HMAC secret, whatever the kid says.
	rsaPub, _ := x509.MarshalPKIXPublicKey(k.rsa.Public())
	for _, kid := range []string{"r1", ""} {
		forged := raw(t, map[string]any{"alg": "HS256", "kid": kid}, claimsAt(now), hs256(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaPub})))
		_, err := withHS.Check(context.Background(), "jwt0", bearerHeaders(forged), nil)
		if !errors.Is(err, ErrSignature) {
			t.Fatalf("HS256 signed with the RSA key, kid %q: %v", kid, err)
		}
	}
	// Only the listed algorithms: ES256 is not listed here.
	if _, err := withHS.Check(context.Background(), "jwt0", bearerHeaders(sign(t, jose.ES256, k.ec, "e1", claimsAt(now))), nil); !errors.Is(err, ErrAlgorithm) {
		t.Fatalf("ES256 not listed: %v", err)
	}
	// An RSA-only JWKS with HS256 listed: no oct key, so no HS256 token passes.
	rsaOnly := checker(t, jwtGuardYAML+"      algorithms: [RS256, HS256]\n", now, map[string]string{"JWKS": k.jwks(t, false)})
	forged := raw(t, map[string]any{"alg": "HS256", "kid": "r1"}, claimsAt(now), hs256(rsaPub))
	if _, err := rsaOnly.Check(context.Background(), "jwt0", bearerHeaders(forged), nil); !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), "no oct key") {
		t.Fatalf("HS256 against an RSA-only JWKS: %v", err)
	}
}

func TestRolesAndIdentityClaims(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	c := checker(t, `  arr:
    type: jwt
    options: { keys: "${env:JWKS}", roles-claim: roles, identity-claim: email }
  plain:
    type: jwt
    options: { keys: "${env:JWKS}" }
`, now, map[string]string{"JWKS": k.jwks(t, false)})
	check := func(guard string, claims map[string]any) (route.Identity, error) {
		return c.Check(context.Background(), guard, bearerHeaders(sign(t, jose.ES256, k.ec, "e1", claims)), nil)
	}
	id, err := check("arr", claimsAt(now, "roles", []string{"admin", "read:items"}, "email", "alice@example.com"))
	if err != nil || id.Subject != "alice@example.com" || !slices.Equal(id.Roles, []string{"admin", "read:items"}) {
		t.Fatalf("array roles: %+v %v", id, err)
	}
	id, err = check("arr", claimsAt(now, "roles", "a  b", "email", "bob@example.com"))
	if err != nil || !slices.Equal(id.Roles, []string{"a", "b"}) {
		t.Fatalf("string roles: %+v %v", id, err)
	}
	id, err = check("arr", claimsAt(now, "email", "bob@example.com"))
	if err != nil || len(id.Roles) != 0 {
		t.Fatalf("no roles claim: %+v %v", id, err)
	}
	if _, err = check("arr", claimsAt(now, "roles", []any{"a", 1}, "email", "bob@example.com")); !errors.Is(err, ErrClaims) {
		t.Fatalf("a number among the roles: %v", err)
	}
	if _, err = check("arr", claimsAt(now)); !errors.Is(err, ErrClaims) || !strings.Contains(err.Error(), `"email"`) {
		t.Fatalf("no email: %v", err)
	}
	// Neither issuer nor audience configured: any is accepted.
	id, err = check("plain", claimsAt(now, "iss", "anyone", "aud", nil))
	if err != nil || id.Subject != "alice" {
		t.Fatalf("no issuer/audience configured: %+v %v", id, err)
	}
}

func TestEnvoyJWT(t *testing.T) {
	c := checker(t, `  ejwt:
    type: envoy-jwt
    options: { provider: jwt_payload }
  perms:
    type: envoy-jwt
    options: { provider: auth0, roles-claim: permissions, identity-claim: email }
`, time.Now(), nil)
	payload := func(provider string, claims map[string]any) map[string]*structpb.Struct {
		p, err := structpb.NewStruct(claims)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]*structpb.Struct{JWTAuthnNamespace: {Fields: map[string]*structpb.Value{provider: structpb.NewStructValue(p)}}}
	}
	// A header token is ignored: only what Envoy verified counts.
	hdr := route.Headers{{Name: "authorization", Value: "Bearer x.y.z"}}

	id, err := c.Check(context.Background(), "ejwt", hdr, payload("jwt_payload", map[string]any{"sub": "alice", "scope": "read:items admin"}))
	if err != nil || id.Subject != "alice" || !slices.Equal(id.Roles, []string{"read:items", "admin"}) {
		t.Fatalf("present: %+v %v", id, err)
	}
	id, err = c.Check(context.Background(), "perms", nil, payload("auth0", map[string]any{"email": "bob@example.com", "permissions": []any{"write:items"}}))
	if err != nil || id.Subject != "bob@example.com" || !slices.Equal(id.Roles, []string{"write:items"}) {
		t.Fatalf("custom claims: %+v %v", id, err)
	}
	for name, md := range map[string]map[string]*structpb.Struct{
		"no metadata":       nil,
		"other namespace":   {"envoy.filters.http.other": {Fields: map[string]*structpb.Value{"jwt_payload": structpb.NewStructValue(&structpb.Struct{})}}},
		"other provider":    payload("someone_else", map[string]any{"sub": "alice"}),
		"not a struct":      {JWTAuthnNamespace: {Fields: map[string]*structpb.Value{"jwt_payload": structpb.NewStringValue("alice")}}},
		"empty namespace":   {JWTAuthnNamespace: {}},
		"nil namespace map": {JWTAuthnNamespace: nil},
	} {
		if _, err := c.Check(context.Background(), "ejwt", hdr, md); !errors.Is(err, ErrNoCredentials) || !strings.Contains(err.Error(), `"jwt_payload"`) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.Check(context.Background(), "ejwt", nil, payload("jwt_payload", map[string]any{"scope": "a"})); !errors.Is(err, ErrClaims) {
		t.Errorf("payload without sub: %v", err)
	}
}

func TestUnknownGuardAndCancelled(t *testing.T) {
	c := checker(t, "  ejwt: { type: envoy-jwt, options: { provider: p } }\n", time.Now(), nil)
	if _, err := c.Check(context.Background(), "nope", nil, nil); !errors.Is(err, ErrUnknownGuard) {
		t.Fatalf("unknown guard: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Check(ctx, "ejwt", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestNewRefusesUnusableKeys(t *testing.T) {
	k := newKeys(t)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	jwks := func(keys ...jose.JSONWebKey) string {
		b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, yaml, jwks, msg string
	}{
		{"no key for the algorithms", "algorithms: [ES384]", jwks(jose.JSONWebKey{Key: k.ec.Public()}), "no key of the JWKS can verify the accepted algorithms (ES384)"},
		{"weak RSA", "", jwks(jose.JSONWebKey{Key: weak.Public(), KeyID: "w"}), `key 0 (kid "w"): RSA key of 1024 bits`},
		{"short HMAC secret", "algorithms: [HS256]", jwks(jose.JSONWebKey{Key: []byte("short")}), "oct key of 5 bytes"},
		{"only encryption keys", "", jwks(jose.JSONWebKey{Key: k.rsa.Public(), Use: "enc"}), "no key of the JWKS"},
		{"alg pinned to another", "algorithms: [RS256]", jwks(jose.JSONWebKey{Key: k.rsa.Public(), Algorithm: "PS256"}), "no key of the JWKS"},
		{"bad key", "", `{"keys":[{"kty":"RSA","n":"AQAB"}]}`, "JWKS key 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(parse(t, "  g:\n    type: jwt\n    options:\n      keys: ${env:JWKS}\n      "+tc.yaml+"\n", map[string]string{"JWKS": tc.jwks}))
			if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), `test.yaml:10:3: guard "g": `) {
				t.Fatalf("New: %v, want %q", err, tc.msg)
			}
		})
	}
}

// A JWKS holding private keys (a common mistake) still verifies with their
// public halves.
func TestPrivateJWKUsesPublicHalf(t *testing.T) {
	k := newKeys(t)
	b, err := jose.JSONWebKey{Key: k.rsa, KeyID: "r1"}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := checker(t, jwtGuardYAML, now, map[string]string{"JWKS": `{"keys":[` + string(b) + `]}`})
	if _, err := c.Check(context.Background(), "jwt0", bearerHeaders(sign(t, jose.RS256, k.rsa, "r1", claimsAt(now))), nil); err != nil {
		t.Fatal(err)
	}
}

func TestCacheRechecksTime(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	c := checker(t, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(t, false)})
	g := (*c.guards.Load())["jwt0"].(*jwtGuard)
	tok := sign(t, jose.RS256, k.rsa, "r1", claimsAt(now, "exp", now.Add(time.Minute).Unix()))
	for range 3 {
		id, err := c.Check(context.Background(), "jwt0", bearerHeaders(tok), nil)
		if err != nil {
			t.Fatal(err)
		}
		id.Roles[0] = "changed by a caller"
	}
	if n := g.cache.len(); n != 1 {
		t.Fatalf("cache holds %d tokens, want 1", n)
	}
	id, _ := c.Check(context.Background(), "jwt0", bearerHeaders(tok), nil)
	if id.Roles[0] != "read:items" {
		t.Fatalf("a caller changed the cached roles: %v", id.Roles)
	}
	// Past exp + skew the cached token is refused like any other.
	c.now = func() time.Time { return now.Add(time.Minute + 31*time.Second) }
	if _, err := c.Check(context.Background(), "jwt0", bearerHeaders(tok), nil); !errors.Is(err, ErrExpired) {
		t.Fatalf("cached token after exp: %v", err)
	}
	// Refused tokens are not cached.
	_, _ = c.Check(context.Background(), "jwt0", bearerHeaders(sign(t, jose.RS256, k.rsa2, "r1", claimsAt(now))), nil)
	if n := g.cache.len(); n != 1 {
		t.Fatalf("cache holds %d tokens after a refusal, want 1", n)
	}
}

func TestCacheBounded(t *testing.T) {
	c := newTokenCache(4)
	for i := range 10 {
		c.put([32]byte{byte(i)}, route.Identity{Subject: fmt.Sprint(i)}, validity{})
	}
	if c.len() != 4 {
		t.Fatalf("len %d", c.len())
	}
	for i := range 10 {
		_, ok := c.get([32]byte{byte(i)})
		if ok != (i >= 6) {
			t.Errorf("entry %d present=%v", i, ok)
		}
	}
}

func TestReload(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	c := checker(t, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(t, false)})
	old := sign(t, jose.RS256, k.rsa, "r1", claimsAt(now))
	if _, err := c.Check(context.Background(), "jwt0", bearerHeaders(old), nil); err != nil {
		t.Fatal(err)
	}
	// Keys rotated: the old key is gone, so are its cached tokens.
	rotated := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.rsa2.Public(), KeyID: "r2"}}}
	b, _ := rotated.Keys[0].MarshalJSON()
	if err := c.Reload(parse(t, jwtGuardYAML, map[string]string{"JWKS": `{"keys":[` + string(b) + `]}`})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(context.Background(), "jwt0", bearerHeaders(old), nil); !errors.Is(err, ErrSignature) {
		t.Fatalf("old key after rotation: %v", err)
	}
	if _, err := c.Check(context.Background(), "jwt0", bearerHeaders(sign(t, jose.RS256, k.rsa2, "r2", claimsAt(now))), nil); err != nil {
		t.Fatal(err)
	}
	// A broken reload keeps the current guards.
	if err := c.Reload(parse(t, jwtGuardYAML+"      algorithms: [ES512]\n", map[string]string{"JWKS": `{"keys":[` + string(b) + `]}`})); err == nil {
		t.Fatal("reload with unusable keys succeeded")
	}
	if _, err := c.Check(context.Background(), "jwt0", bearerHeaders(sign(t, jose.RS256, k.rsa2, "r2", claimsAt(now))), nil); err != nil {
		t.Fatalf("after a refused reload: %v", err)
	}
}

// Check is called from many exchanges at once.
func TestConcurrentChecks(t *testing.T) {
	k := newKeys(t)
	now := time.Now()
	c := checker(t, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(t, false)})
	tokens := []string{
		sign(t, jose.RS256, k.rsa, "r1", claimsAt(now)),
		sign(t, jose.ES256, k.ec, "e1", claimsAt(now)),
		sign(t, jose.RS256, k.rsa2, "r1", claimsAt(now)), // refused
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Go(func() {
			for j := range 50 {
				tok := tokens[(i+j)%len(tokens)]
				_, err := c.Check(context.Background(), "jwt0", bearerHeaders(tok), nil)
				if (tok == tokens[2]) != (err != nil) {
					errs <- fmt.Errorf("token %d: %v", (i+j)%len(tokens), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
