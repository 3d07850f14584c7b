package guard

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// keys are an issuer's signing keys, made per test.
type keys struct {
	rsa     *rsa.PrivateKey
	rsa2    *rsa.PrivateKey // another RSA key: the same kid, another key
	ec      *ecdsa.PrivateKey
	ed      ed25519.PrivateKey
	hmacKey []byte
}

func newKeys(t testing.TB) *keys {
	t.Helper()
	k := &keys{hmacKey: []byte("0123456789abcdef0123456789abcdef")}
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	if _, k.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	return k
}

// jwks is the public JWKS: rsa as kid "r1", ec as "e1", ed as "d1", and with
// withHMAC the shared secret as "h1".
func (k *keys) jwks(t testing.TB, withHMAC bool) string {
	t.Helper()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: k.rsa.Public(), KeyID: "r1", Use: "sig"},
		{Key: k.ec.Public(), KeyID: "e1", Use: "sig"},
		{Key: k.ed.Public(), KeyID: "d1", Use: "sig"},
	}}
	if withHMAC {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.hmacKey, KeyID: "h1", Algorithm: "HS256"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sign signs claims with key under alg, with kid in the header when set.
func sign(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// raw builds a compact token from a header and claims with the given
// signature bytes, for tokens no library would sign (alg none, forgeries).
func raw(t testing.TB, header, claims map[string]any, sig func(input string) []byte) string {
	t.Helper()
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	return input + "." + base64.RawURLEncoding.EncodeToString(sig(input))
}

// hs256 signs input with secret (an attacker's HMAC).
func hs256(secret []byte) func(string) []byte {
	return func(input string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(input))
		return m.Sum(nil)
	}
}

// rs256 signs input with an RSA key directly.
func rs256(t testing.TB, k *rsa.PrivateKey) func(string) []byte {
	return func(input string) []byte {
		d := sha256.Sum256([]byte(input))
		s, err := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:])
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

const (
	testIssuer   = "https://auth.example.com"
	testAudience = "https://api.example.com"
)

// claimsAt are valid claims for a token issued at now.
func claimsAt(now time.Time, extra ...any) map[string]any {
	c := map[string]any{
		"iss":   testIssuer,
		"aud":   testAudience,
		"sub":   "alice",
		"scope": "read:items write:items",
		"iat":   now.Unix(),
		"nbf":   now.Unix(),
		"exp":   now.Add(time.Hour).Unix(),
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == nil {
			delete(c, extra[i].(string))
			continue
		}
		c[extra[i].(string)] = extra[i+1]
	}
	return c
}

// checker parses a configuration (guards only matter) as the binary does,
// with env supplying ${env:...} values, and builds a Checker on it with its
// clock at now.
func checker(t testing.TB, guardsYAML string, now time.Time, env map[string]string) *Checker {
	t.Helper()
	c, err := New(parse(t, guardsYAML, env))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.now = func() time.Time { return now }
	return c
}

func parse(t testing.TB, guardsYAML string, env map[string]string) *config.Config {
	t.Helper()
	doc := `bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - exit: kafka0
        with: { capability: produce, topic: events }
guards:
` + guardsYAML
	cfg, err := config.Parse("test.yaml", []byte(doc), func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

func bearerHeaders(token string) route.Headers {
	return route.Headers{{Name: ":method", Value: "GET"}, {Name: ":path", Value: "/items"}, {Name: "authorization", Value: "Bearer " + token}}
}

// assertNoToken fails if msg contains the token or any of its parts.
func assertNoToken(t *testing.T, msg, token string) {
	t.Helper()
	for _, part := range append(strings.Split(token, "."), token) {
		if len(part) >= 8 && strings.Contains(msg, part) {
			t.Errorf("the error echoes the token: %s", msg)
		}
	}
}
