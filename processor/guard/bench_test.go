package guard

import (
	"context"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// BenchmarkCheck measures a check with the token cache (the same token again,
// as a client reusing its token does) and without it (every token new).
func BenchmarkCheck(b *testing.B) {
	k := newKeys(b)
	now := time.Now()
	for _, tc := range []struct {
		alg jose.SignatureAlgorithm
		key any
		kid string
	}{{jose.RS256, k.rsa, "r1"}, {jose.ES256, k.ec, "e1"}, {jose.EdDSA, k.ed, "d1"}} {
		tok := sign(b, tc.alg, tc.key, tc.kid, claimsAt(now))
		h := bearerHeaders(tok)
		b.Run(string(tc.alg)+"/cached", func(b *testing.B) {
			c := checker(b, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(b, false)})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Check(context.Background(), "jwt0", h, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(string(tc.alg)+"/uncached", func(b *testing.B) {
			c := checker(b, jwtGuardYAML, now, map[string]string{"JWKS": k.jwks(b, false)})
			(*c.guards.Load())["jwt0"].(*jwtGuard).cache = newTokenCache(0)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Check(context.Background(), "jwt0", h, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
