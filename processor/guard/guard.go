// Package guard verifies the credentials of guarded routes
// (docs/design.md#routes-and-guards): it implements route.GuardChecker for
// every guard of a configuration.
//
// A `jwt` guard verifies `authorization: Bearer <token>` itself with
// go-jose: the signature against the configured JWKS, with only the
// configured algorithms (never `none`; a key is used only for the algorithms
// of its type, so an HMAC token can never be checked against an RSA or EC
// public key); `iss` and `aud` when configured; `exp` (required) and `nbf`
// with the configured clock skew. An `envoy-jwt` guard trusts the payload
// Envoy's jwt_authn filter verified and forwarded in the ext_proc
// metadata_context (namespace envoy.filters.http.jwt_authn, key = the
// provider's payload_in_metadata name): the ext_proc port trusts its peer
// (docs/design.md#the-processors-port-trusts-its-peer), so that port must be
// reachable by Envoy alone.
//
// Both establish an identity (the `sub` claim, or the configured one: a
// non-empty string, required) and roles (the `scope` claim as a
// space-separated string, or the configured claim as such a string or an
// array of strings; absent = no roles). Claims are top-level names.
//
// Errors say what is wrong ("token expired at …", "issuer … is not
// accepted") and never contain the token; values the client controls are
// quoted and shortened.
package guard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// JWTAuthnNamespace is the metadata namespace Envoy's jwt_authn filter writes
// verified payloads to (payload_in_metadata), forwarded by ext_proc's
// metadata_options.forwarding_namespaces.untyped.
const JWTAuthnNamespace = "envoy.filters.http.jwt_authn"

// Error kinds, for errors.Is; every error returned by Check wraps one.
var (
	ErrNoCredentials = errors.New("no credentials")
	ErrMalformed     = errors.New("malformed credentials")
	ErrAlgorithm     = errors.New("signature algorithm not accepted")
	ErrSignature     = errors.New("signature not verified")
	ErrExpired       = errors.New("token expired")
	ErrNotYetValid   = errors.New("token not yet valid")
	ErrIssuer        = errors.New("issuer not accepted")
	ErrAudience      = errors.New("audience not accepted")
	ErrClaims        = errors.New("claims unusable")
	ErrUnknownGuard  = errors.New("unknown guard")
)

// checkError is a specific message with its kind.
type checkError struct {
	kind error
	msg  string
}

func (e *checkError) Error() string { return e.msg }
func (e *checkError) Unwrap() error { return e.kind }

func fail(kind error, format string, args ...any) error {
	return &checkError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// verifier is one configured guard.
type verifier interface {
	check(headers route.Headers, metadata map[string]*structpb.Struct, now time.Time) (route.Identity, error)
}

// Checker checks every guard of a configuration. It is safe for concurrent
// use; Reload swaps the whole set atomically.
type Checker struct {
	guards atomic.Pointer[map[string]verifier]
	now    func() time.Time // tests move the clock
}

// New builds a checker for every guard of cfg. It fails when a guard cannot
// work: an unusable JWKS, a key no configured algorithm can use, an
// unsupported type. Call it at startup so such mistakes stop the process
// there rather than turning every request into a 401.
func New(cfg *config.Config) (*Checker, error) {
	c := &Checker{now: time.Now}
	if err := c.Reload(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload replaces the guards with those of cfg (for a configuration reload,
// e.g. rotated keys). On error the current guards stay. Reload the checker
// before the routes: in between, an old route whose guard was removed fails
// closed (401), and a new route never names a guard the checker lacks.
func (c *Checker) Reload(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("building guards: no configuration")
	}
	set := make(map[string]verifier, len(cfg.Guards))
	names := make([]string, 0, len(cfg.Guards))
	for name := range cfg.Guards {
		names = append(names, name)
	}
	sort.Strings(names) // report the same first error every time
	for _, name := range names {
		g := cfg.Guards[name]
		if g == nil || g.JWT == nil {
			return fmt.Errorf("guard %q: no options", name)
		}
		var (
			v   verifier
			err error
		)
		switch g.Type {
		case "jwt":
			v, err = newJWTGuard(g.JWT)
		case "envoy-jwt":
			v, err = newEnvoyJWTGuard(g.JWT)
		default:
			err = fmt.Errorf("unsupported type %q", g.Type)
		}
		if err != nil {
			if g.Pos.Line > 0 { // point at the guard in the file, as the loader does
				return fmt.Errorf("%s: guard %q: %w", g.Pos, name, err)
			}
			return fmt.Errorf("guard %q: %w", name, err)
		}
		set[name] = v
	}
	c.guards.Store(&set)
	return nil
}

// Check implements route.GuardChecker: it verifies the request's credentials
// for the named guard and returns the identity and roles they establish.
func (c *Checker) Check(ctx context.Context, guard string, headers route.Headers, metadata map[string]*structpb.Struct) (route.Identity, error) {
	if err := ctx.Err(); err != nil {
		return route.Identity{}, fmt.Errorf("checking guard %q: %w", guard, err)
	}
	v, ok := (*c.guards.Load())[guard]
	if !ok {
		return route.Identity{}, fail(ErrUnknownGuard, "guard %q is not configured", guard)
	}
	return v.check(headers, metadata, c.now())
}

// identityOf reads the identity and roles from verified claims.
func identityOf(claims map[string]any, identityClaim, rolesClaim string) (route.Identity, error) {
	var id route.Identity
	switch v := claims[identityClaim].(type) {
	case string:
		if v == "" {
			return id, fail(ErrClaims, "the identity claim %q is empty", identityClaim)
		}
		id.Subject = v
	case nil:
		return id, fail(ErrClaims, "the token has no identity claim %q", identityClaim)
	default:
		return id, fail(ErrClaims, "the identity claim %q is not a string", identityClaim)
	}
	switch v := claims[rolesClaim].(type) {
	case nil:
	case string:
		id.Roles = strings.Fields(v)
	case []any:
		id.Roles = make([]string, 0, len(v))
		for _, r := range v {
			s, ok := r.(string)
			if !ok {
				return route.Identity{}, fail(ErrClaims, "the roles claim %q holds a value that is not a string", rolesClaim)
			}
			id.Roles = append(id.Roles, s)
		}
	default:
		return route.Identity{}, fail(ErrClaims, "the roles claim %q is neither a string nor an array of strings", rolesClaim)
	}
	return id, nil
}

// quote renders a value the client chose, bounded: it ends up in the answer
// and in logs.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
