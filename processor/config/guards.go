package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

func (d *decoder) guards(n ast.Node, cfg *Config) {
	_, entries, ok := d.mapping(n, "guards", "guard name")
	if !ok {
		return
	}
	for _, e := range entries {
		d.guardNames[e.key] = true
	}
	for _, e := range entries {
		if !nameRe.MatchString(e.key) {
			d.errorf(e.kn, "guard name %q must start with a letter or digit and use only letters, digits, '.', '_' and '-'", e.key)
			continue
		}
		if g := d.guard(e); g != nil {
			cfg.Guards[e.key] = g
		}
	}
}

func (d *decoder) guard(e entry) *Guard {
	owner := fmt.Sprintf("guard %q", e.key)
	node, fields, ok := d.mapping(e.v, owner, "key")
	if !ok {
		return nil
	}
	typ, ok := d.discriminator(node, fields, "type", "guard type", owner, d.shape.guard.values()...)
	if !ok {
		d.fields(fields, "a guard", d.shape.guard.names()...)
		return nil
	}
	m := d.fields(fields, "a "+typ+" guard", d.shape.guard.variant(typ).names()...)
	g := &Guard{Name: e.key, Type: typ, Pos: d.pos(e.kn)}
	o := m["options"]
	if o == nil {
		if typ == "jwt" {
			d.errorf(node, "missing required field \"options\": a jwt guard needs at least keys or keys-file")
		} else {
			d.errorf(node, "missing required field \"options\": an envoy-jwt guard needs at least provider")
		}
		return nil
	}
	on, entries, ok := d.mapping(o.v, "options", "key")
	if !ok {
		return nil
	}
	j := &JWTOptions{RolesClaim: DefaultRolesClaim, IdentityClaim: DefaultIdentityClaim}
	if typ == "envoy-jwt" {
		ok = d.envoyJWTOptions(on, entries, j)
	} else {
		ok = d.jwtOptions(on, entries, j)
	}
	if !ok {
		return nil
	}
	g.JWT = j
	return g
}

// envoyJWTOptions decodes the options of an envoy-jwt guard into j.
func (d *decoder) envoyJWTOptions(on ast.Node, entries []entry, j *JWTOptions) bool {
	om := d.fields(entries, "envoy-jwt guard options", d.shape.envoyOptions.names()...)
	ok := d.optionString(om, "provider", &j.Provider)
	ok = d.optionString(om, "roles-claim", &j.RolesClaim) && ok
	ok = d.optionString(om, "identity-claim", &j.IdentityClaim) && ok
	if om["provider"] == nil {
		d.errorf(on, "missing required field \"provider\": the jwt_authn provider whose payload Envoy forwards (payload_in_metadata)")
		ok = false
	}
	return ok
}

// jwtOptions decodes the options of a jwt guard into j.
func (d *decoder) jwtOptions(on ast.Node, entries []entry, j *JWTOptions) bool {
	om := d.fields(entries, "jwt guard options", d.shape.jwtOptions.names()...)
	ok := d.optionString(om, "issuer", &j.Issuer)
	ok = d.optionString(om, "audience", &j.Audience) && ok
	ok = d.optionString(om, "roles-claim", &j.RolesClaim) && ok
	ok = d.optionString(om, "identity-claim", &j.IdentityClaim) && ok
	j.Skew = DefaultSkew
	if x := om["skew"]; x != nil {
		if v, good := d.duration(x.v, "skew", true); good {
			j.Skew = v
		} else {
			ok = false
		}
	}
	j.Algorithms = DefaultAlgorithms()
	if x := om["algorithms"]; x != nil {
		algs, good := d.algorithms(x.v)
		ok = ok && good
		j.Algorithms = algs
	}
	keys, keysFile := om["keys"], om["keys-file"]
	switch {
	case keys != nil && keysFile != nil:
		d.errorf(keysFile.kn, "give keys or keys-file, not both")
		ok = false
	case keys != nil:
		j.Keys = d.inlineKeys(keys.v)
		ok = ok && j.Keys != nil
	case keysFile != nil:
		j.Keys = d.keysFile(keysFile.v)
		ok = ok && j.Keys != nil
	default:
		d.errorf(on, "missing required field \"keys\" or \"keys-file\": the JWKS that verifies tokens")
		ok = false
	}
	return ok
}

func (d *decoder) algorithms(n ast.Node) ([]string, bool) {
	sn, items, ok := d.sequence(n, "algorithms")
	if !ok {
		return nil, false
	}
	if len(items) == 0 {
		d.errorf(sn, "algorithms must not be empty: omit it to accept every asymmetric algorithm")
		return nil, false
	}
	var out []string
	for _, it := range items {
		if it == nil {
			ok = false
			continue
		}
		s, good := d.str(it, "an algorithm")
		switch {
		case !good:
			ok = false
		case strings.EqualFold(s, "none"):
			d.errorf(it, "algorithm none is never accepted: tokens must be signed")
			ok = false
		case !slices.Contains(jwtAlgorithms(), s):
			d.errorf(it, "unknown algorithm %q; allowed: %s", s, strings.Join(jwtAlgorithms(), ", "))
			ok = false
		default:
			out = append(out, s)
		}
	}
	return out, ok
}

// inlineKeys reads `keys`: a sequence of JWKs, or a string holding a JWKS
// document (typically `${env:JWKS}`). It returns the JWKS as JSON.
func (d *decoder) inlineKeys(n ast.Node) []byte {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode:
		s, ok := d.str(n, "keys")
		if !ok {
			return nil
		}
		if err := checkJWKS([]byte(s)); err != nil {
			d.errorf(n, "keys: %v", err)
			return nil
		}
		return []byte(s)
	case *ast.SequenceNode:
	default:
		d.wrongType(n, "keys", "a sequence of JWKs or a string holding a JWKS document")
		return nil
	}
	budget := maxJSONNodes
	v, ok := d.toJSON(n, 0, &budget)
	if !ok {
		return nil
	}
	doc, err := json.Marshal(map[string]any{"keys": v})
	if err != nil {
		d.errorf(n, "keys: %v", err)
		return nil
	}
	if err := checkJWKS(doc); err != nil {
		d.errorf(n, "keys: %v", err)
		return nil
	}
	return doc
}

func (d *decoder) keysFile(n ast.Node) []byte {
	name, ok := d.nonEmpty(n, "keys-file")
	if !ok {
		return nil
	}
	b, err := d.readBytes(name)
	if err != nil {
		d.errorf(n, "keys-file: %v", err)
		return nil
	}
	if err := checkJWKS(b); err != nil {
		d.errorf(n, "keys-file %s: %v", name, err)
		return nil
	}
	return b
}

// checkJWKS checks the shape of a JWKS document; the guard package parses the
// keys themselves.
func checkJWKS(b []byte) error {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("not a JWKS document: invalid JSON at byte %d", se.Offset)
		}
		return errors.New(`not a JWKS document: expected {"keys": [...]}`)
	}
	if len(doc.Keys) == 0 {
		return errors.New(`the JWKS has no keys: expected {"keys": [{"kty": ...}, ...]}`)
	}
	for i, k := range doc.Keys {
		var key struct {
			Kty any `json:"kty"`
		}
		if err := json.Unmarshal(k, &key); err != nil {
			return fmt.Errorf("key %d is not a JSON object", i)
		}
		if s, ok := key.Kty.(string); !ok || s == "" {
			return fmt.Errorf("key %d has no \"kty\" (RSA, EC, OKP or oct)", i)
		}
	}
	return nil
}

// maxJSONNodes and maxJSONDepth bound the expansion of inline keys: aliases
// can make a small file describe a huge or circular value.
const (
	maxJSONNodes = 10000
	maxJSONDepth = 32
)

// toJSON converts a YAML value to a JSON-compatible value, resolving
// references in strings.
func (d *decoder) toJSON(n ast.Node, depth int, budget *int) (any, bool) {
	*budget--
	if depth > maxJSONDepth || *budget < 0 {
		d.errorf(n, "value too large or too deeply nested")
		return nil, false
	}
	switch v := n.(type) {
	case nil:
		return nil, false
	case *ast.NullNode:
		return nil, true
	case *ast.StringNode, *ast.LiteralNode:
		return d.str(n, "a key field")
	case *ast.BoolNode:
		return v.Value, true
	case *ast.IntegerNode:
		return v.Value, true
	case *ast.FloatNode:
		return v.Value, true
	case *ast.SequenceNode:
		out := []any{}
		ok := true
		for _, it := range v.Values {
			x, good := d.toJSON(d.value(it), depth+1, budget)
			ok = ok && good
			out = append(out, x)
			if *budget < 0 {
				return nil, false
			}
		}
		return out, ok
	case *ast.MappingNode, *ast.MappingValueNode:
		_, entries, ok := d.mapping(n, "a key", "key")
		if !ok {
			return nil, false
		}
		out := map[string]any{}
		for _, e := range entries {
			x, good := d.toJSON(e.v, depth+1, budget)
			ok = ok && good
			out[e.key] = x
			if *budget < 0 {
				return nil, false
			}
		}
		return out, ok
	}
	d.errorf(n, "keys cannot hold %s", describe(n))
	return nil, false
}

// DefaultAlgorithms are the JWT algorithms a jwt guard accepts when the file
// lists none: every asymmetric JOSE algorithm. HMAC (HS*) must be listed
// explicitly, so a public key can never be used as a shared secret.
func DefaultAlgorithms() []string {
	return []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
}

// jwtAlgorithms are the algorithms a jwt guard may list.
func jwtAlgorithms() []string { return append(DefaultAlgorithms(), "HS256", "HS384", "HS512") }
