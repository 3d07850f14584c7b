package guard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// FuzzCheck sends any authorization header to a jwt guard: it never panics,
// every refusal is of a known kind, and a refusal never quotes the header.
func FuzzCheck(f *testing.F) {
	k := newKeys(f)
	now := time.Now()
	c := checker(f, jwtGuardYAML+"      algorithms: [RS256, ES256, HS256]\n", now, map[string]string{"JWKS": k.jwks(f, true)})
	valid := []string{
		sign(f, jose.RS256, k.rsa, "r1", claimsAt(now)),
		sign(f, jose.ES256, k.ec, "e1", claimsAt(now)),
		sign(f, jose.HS256, k.hmacKey, "h1", claimsAt(now)),
	}
	for _, v := range valid {
		f.Add("Bearer " + v)
	}
	f.Add("Bearer " + raw(f, map[string]any{"alg": "none"}, claimsAt(now), func(string) []byte { return nil }))
	f.Add("Bearer " + raw(f, map[string]any{"alg": "HS256", "kid": "r1", "crit": []string{"b64"}, "b64": false}, claimsAt(now), hs256(k.hmacKey)))
	f.Add("Bearer " + raw(f, map[string]any{"alg": "RS256", "jwk": map[string]any{"kty": "oct", "k": "AAAA"}}, claimsAt(now, "exp", 1e300), rs256(f, k.rsa)))
	f.Add("Basic YWxpY2U6c2VjcmV0")
	f.Add("Bearer e30.e30.")
	f.Add("bearer    a.b.c")
	f.Add("")
	kinds := []error{ErrNoCredentials, ErrMalformed, ErrAlgorithm, ErrSignature, ErrExpired, ErrNotYetValid, ErrIssuer, ErrAudience, ErrClaims}
	f.Fuzz(func(t *testing.T, header string) {
		id, err := c.Check(context.Background(), "jwt0", route.Headers{{Name: "authorization", Value: header}}, nil)
		if err == nil {
			if id.Subject == "" {
				t.Fatalf("accepted without an identity: %q", header)
			}
			return
		}
		known := false
		for _, kind := range kinds {
			known = known || errors.Is(err, kind)
		}
		if !known {
			t.Fatalf("error of no known kind: %v", err)
		}
		if len(header) >= 64 && strings.Contains(err.Error(), header[len(header)-64:]) {
			t.Fatalf("the error quotes the header: %v", err)
		}
	})
}
