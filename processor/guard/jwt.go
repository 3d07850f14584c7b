package guard

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

const (
	// maxTokenBytes bounds the work an unauthenticated client can ask for;
	// real access tokens are a few hundred bytes to a few KiB.
	maxTokenBytes = 16 << 10
	// minRSABits: shorter RSA keys are refused at startup (NIST SP 800-131A).
	minRSABits = 2048
)

// jwtGuard is a `jwt` guard: it verifies bearer tokens itself.
type jwtGuard struct {
	issuer, audience string
	algs             []jose.SignatureAlgorithm
	keys             []verifyKey
	skew             time.Duration
	rolesClaim       string
	identityClaim    string
	cache            *tokenCache
}

// verifyKey is one usable key of the JWKS.
type verifyKey struct {
	kid  string
	key  any                       // *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey or []byte (oct)
	algs []jose.SignatureAlgorithm // the configured algorithms this key verifies
}

func newJWTGuard(o *config.JWTOptions) (*jwtGuard, error) {
	g := &jwtGuard{
		issuer: o.Issuer, audience: o.Audience, skew: o.Skew,
		rolesClaim: o.RolesClaim, identityClaim: o.IdentityClaim,
		cache: newTokenCache(defaultCacheSize),
	}
	if g.rolesClaim == "" {
		g.rolesClaim = config.DefaultRolesClaim
	}
	if g.identityClaim == "" {
		g.identityClaim = config.DefaultIdentityClaim
	}
	names := o.Algorithms
	if len(names) == 0 {
		names = config.DefaultAlgorithms()
	}
	for _, n := range names {
		a := jose.SignatureAlgorithm(n)
		if _, known := keyKindOf(a); !known {
			return nil, fmt.Errorf("algorithm %q is not supported", n)
		}
		g.algs = append(g.algs, a)
	}
	keys, err := parseJWKS(o.Keys, g.algs)
	if err != nil {
		return nil, err
	}
	g.keys = keys
	return g, nil
}

// keyKindOf says which key type verifies an algorithm; none is never known.
func keyKindOf(a jose.SignatureAlgorithm) (string, bool) {
	switch a {
	case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512:
		return "RSA", true
	case jose.ES256, jose.ES384, jose.ES512:
		return "EC", true
	case jose.EdDSA:
		return "OKP", true
	case jose.HS256, jose.HS384, jose.HS512:
		return "oct", true
	}
	return "", false
}

// parseJWKS parses the guard's JWKS and keeps the keys some configured
// algorithm can use. Each key is tied to the algorithms of its own type, so a
// token's alg header can never make a public key act as an HMAC secret.
func parseJWKS(doc []byte, algs []jose.SignatureAlgorithm) ([]verifyKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(doc, &set); err != nil {
		return nil, errors.New(`the JWKS is not a JSON object {"keys": [...]}`)
	}
	var out []verifyKey
	for i, raw := range set.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("JWKS key %d: %w", i, err)
		}
		if k.Use == "enc" {
			continue // an encryption key never verifies signatures
		}
		if !k.IsPublic() {
			if _, secret := k.Key.([]byte); !secret {
				k = k.Public() // a private JWK was given: use its public half
			}
		}
		can, err := keyAlgorithms(k)
		if err != nil {
			return nil, fmt.Errorf("JWKS key %d (kid %q): %w", i, k.KeyID, err)
		}
		var usable []jose.SignatureAlgorithm
		for _, a := range can {
			if slices.Contains(algs, a) && (k.Algorithm == "" || k.Algorithm == string(a)) {
				usable = append(usable, a)
			}
		}
		if len(usable) > 0 {
			out = append(out, verifyKey{kid: k.KeyID, key: k.Key, algs: usable})
		}
	}
	if len(out) == 0 {
		names := make([]string, len(algs))
		for i, a := range algs {
			names[i] = string(a)
		}
		return nil, fmt.Errorf("no key of the JWKS can verify the accepted algorithms (%s): check the keys' kty, crv, alg and use", strings.Join(names, ", "))
	}
	return out, nil
}

// keyAlgorithms lists the algorithms a key's type and size allow.
func keyAlgorithms(k jose.JSONWebKey) ([]jose.SignatureAlgorithm, error) {
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		if n := key.N.BitLen(); n < minRSABits {
			return nil, fmt.Errorf("RSA key of %d bits; at least %d are required", n, minRSABits)
		}
		return []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512}, nil
	case *ecdsa.PublicKey:
		switch key.Curve {
		case elliptic.P256():
			return []jose.SignatureAlgorithm{jose.ES256}, nil
		case elliptic.P384():
			return []jose.SignatureAlgorithm{jose.ES384}, nil
		case elliptic.P521():
			return []jose.SignatureAlgorithm{jose.ES512}, nil
		}
		return nil, errors.New("unsupported EC curve")
	case ed25519.PublicKey:
		return []jose.SignatureAlgorithm{jose.EdDSA}, nil
	case []byte:
		// RFC 7518 §3.2: the secret is at least as long as the hash.
		var algs []jose.SignatureAlgorithm
		if len(key) >= 32 {
			algs = append(algs, jose.HS256)
		}
		if len(key) >= 48 {
			algs = append(algs, jose.HS384)
		}
		if len(key) >= 64 {
			algs = append(algs, jose.HS512)
		}
		if algs == nil {
			return nil, fmt.Errorf("oct key of %d bytes; HMAC needs at least 32", len(key))
		}
		return algs, nil
	}
	return nil, fmt.Errorf("unsupported key type %T", k.Key)
}

func (g *jwtGuard) check(headers route.Headers, _ map[string]*structpb.Struct, now time.Time) (route.Identity, error) {
	token, err := bearer(headers)
	if err != nil {
		return route.Identity{}, err
	}
	sum := sha256.Sum256([]byte(token))
	if e, ok := g.cache.get(sum); ok {
		if err := g.inTime(e.validity, now); err != nil {
			return route.Identity{}, err
		}
		return e.identity(), nil
	}
	payload, err := g.verify(token)
	if err != nil {
		return route.Identity{}, err
	}
	id, v, err := g.claims(payload, now)
	if err != nil {
		return route.Identity{}, err
	}
	g.cache.put(sum, id, v)
	return id, nil
}

// bearer extracts the token of `authorization: Bearer <token>` (RFC 6750
// §2.1; the scheme is case-insensitive).
func bearer(headers route.Headers) (string, error) {
	vs := headers.Values("authorization")
	switch len(vs) {
	case 0:
		return "", fail(ErrNoCredentials, "the request has no authorization header")
	case 1:
	default:
		return "", fail(ErrMalformed, "the request has %d authorization headers; send one", len(vs))
	}
	scheme, rest, _ := strings.Cut(strings.TrimSpace(vs[0]), " ")
	if !strings.EqualFold(scheme, "bearer") {
		// The scheme is named only when it is a plain word: the rest of the
		// header may be someone's credentials.
		if len(scheme) <= 16 && isToken(scheme) {
			return "", fail(ErrMalformed, "the authorization scheme is %q, not Bearer", scheme)
		}
		return "", fail(ErrMalformed, "the authorization header is not a Bearer token")
	}
	token := strings.TrimLeft(rest, " ")
	switch {
	case token == "":
		return "", fail(ErrMalformed, "the Bearer token is empty")
	case len(token) > maxTokenBytes:
		return "", fail(ErrMalformed, "the Bearer token is %d bytes; at most %d are accepted", len(token), maxTokenBytes)
	case strings.ContainsAny(token, " \t"):
		return "", fail(ErrMalformed, "the Bearer token contains whitespace")
	}
	return token, nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// verify checks the token's form, algorithm and signature and returns its
// payload.
func (g *jwtGuard) verify(token string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(token, g.algs)
	if err != nil {
		var ua *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &ua) {
			return nil, fail(ErrAlgorithm, "the token's algorithm %s is not accepted (accepted: %s)", quote(string(ua.Got)), g.algNames())
		}
		// The library's message can quote parts of the input: keep it out.
		return nil, fail(ErrMalformed, "the Bearer token is not a signed JWT (compact JWS: header.payload.signature in base64url)")
	}
	h := jws.Signatures[0].Header
	alg := jose.SignatureAlgorithm(h.Algorithm)
	tried := 0
	for _, k := range g.keys {
		if !slices.Contains(k.algs, alg) || (h.KeyID != "" && k.kid != "" && k.kid != h.KeyID) {
			continue
		}
		tried++
		if payload, err := jws.Verify(k.key); err == nil {
			return payload, nil
		}
	}
	kind, _ := keyKindOf(alg)
	switch {
	case tried == 0 && h.KeyID != "":
		return nil, fail(ErrSignature, "no %s key with kid %s in the JWKS verifies %s", kind, quote(h.KeyID), alg)
	case tried == 0:
		return nil, fail(ErrSignature, "no %s key in the JWKS verifies %s", kind, alg)
	}
	if h.KeyID != "" {
		return nil, fail(ErrSignature, "the token's %s signature does not verify with the JWKS's %s key for kid %s", alg, kind, quote(h.KeyID))
	}
	return nil, fail(ErrSignature, "the token's %s signature does not verify with any %s key of the JWKS", alg, kind)
}

func (g *jwtGuard) algNames() string {
	names := make([]string, len(g.algs))
	for i, a := range g.algs {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// validity is the time window of a verified token.
type validity struct {
	exp time.Time
	nbf time.Time // zero: none
}

func (g *jwtGuard) inTime(v validity, now time.Time) error {
	if !now.Before(v.exp.Add(g.skew)) {
		return fail(ErrExpired, "the token expired at %s (now %s, clock skew allowed %s)", stamp(v.exp), stamp(now), g.skew)
	}
	if !v.nbf.IsZero() && now.Add(g.skew).Before(v.nbf) {
		return fail(ErrNotYetValid, "the token is not valid before %s (now %s, clock skew allowed %s)", stamp(v.nbf), stamp(now), g.skew)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// claims validates the registered claims of a verified payload and reads
// identity and roles.
func (g *jwtGuard) claims(payload []byte, now time.Time) (route.Identity, validity, error) {
	var v validity
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var c map[string]any
	if err := dec.Decode(&c); err != nil || c == nil || dec.More() {
		return route.Identity{}, v, fail(ErrMalformed, "the token's payload is not a JSON object")
	}
	exp, present, err := numericDate(c, "exp")
	switch {
	case err != nil:
		return route.Identity{}, v, err
	case !present:
		return route.Identity{}, v, fail(ErrClaims, "the token has no exp claim: tokens that never expire are refused")
	}
	v.exp = exp
	if v.nbf, _, err = numericDate(c, "nbf"); err != nil {
		return route.Identity{}, v, err
	}
	if err := g.inTime(v, now); err != nil {
		return route.Identity{}, v, err
	}
	if g.issuer != "" {
		switch iss := c["iss"].(type) {
		case string:
			if iss != g.issuer {
				return route.Identity{}, v, fail(ErrIssuer, "the token's issuer %s is not accepted (want %q)", quote(iss), g.issuer)
			}
		case nil:
			return route.Identity{}, v, fail(ErrIssuer, "the token has no iss claim (want %q)", g.issuer)
		default:
			return route.Identity{}, v, fail(ErrIssuer, "the token's iss claim is not a string (want %q)", g.issuer)
		}
	}
	if g.audience != "" {
		if err := g.checkAudience(c["aud"]); err != nil {
			return route.Identity{}, v, err
		}
	}
	id, err := identityOf(c, g.identityClaim, g.rolesClaim)
	return id, v, err
}

// checkAudience: aud is a string or an array of strings (RFC 7519 §4.1.3)
// that must contain the configured audience.
func (g *jwtGuard) checkAudience(aud any) error {
	var got []string
	switch a := aud.(type) {
	case nil:
		return fail(ErrAudience, "the token has no aud claim (want %q)", g.audience)
	case string:
		got = []string{a}
	case []any:
		for _, x := range a {
			s, ok := x.(string)
			if !ok {
				return fail(ErrAudience, "the token's aud claim holds a value that is not a string")
			}
			got = append(got, s)
		}
	default:
		return fail(ErrAudience, "the token's aud claim is neither a string nor an array of strings")
	}
	if slices.Contains(got, g.audience) {
		return nil
	}
	shown := make([]string, 0, 3)
	for i, s := range got {
		if i == 3 {
			shown = append(shown, fmt.Sprintf("and %d more", len(got)-3))
			break
		}
		shown = append(shown, quote(s))
	}
	return fail(ErrAudience, "the token's audience [%s] does not include %q", strings.Join(shown, ", "), g.audience)
}

// maxNumericDate clamps dates to ±2^40 s (about 34,800 years) so that any
// JSON number converts to a time without overflow.
const maxNumericDate = 1 << 40

// numericDate reads a NumericDate claim (RFC 7519 §2: seconds since the
// epoch, possibly fractional).
func numericDate(c map[string]any, name string) (time.Time, bool, error) {
	raw, ok := c[name]
	if !ok || raw == nil {
		return time.Time{}, false, nil
	}
	n, ok := raw.(json.Number)
	if !ok {
		return time.Time{}, true, fail(ErrClaims, "the token's %s claim is not a number", name)
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) {
		return time.Time{}, true, fail(ErrClaims, "the token's %s claim is not a number", name)
	}
	f = math.Max(-maxNumericDate, math.Min(maxNumericDate, f))
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, nil
}
