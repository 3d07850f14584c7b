package guard

import (
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// envoyJWTGuard is an `envoy-jwt` guard: Envoy's jwt_authn filter verified
// the token (signature, issuer, audience, exp/nbf) and wrote its payload to
// its dynamic metadata under the provider's payload_in_metadata name;
// ext_proc forwards that namespace. Nothing is verified again: the ext_proc
// port trusts its peer (docs/design.md#the-processors-port-trusts-its-peer).
type envoyJWTGuard struct {
	provider      string
	rolesClaim    string
	identityClaim string
}

func newEnvoyJWTGuard(o *config.JWTOptions) (*envoyJWTGuard, error) {
	g := &envoyJWTGuard{provider: o.Provider, rolesClaim: o.RolesClaim, identityClaim: o.IdentityClaim}
	if g.provider == "" {
		return nil, errors.New("an envoy-jwt guard needs provider: the jwt_authn provider's payload_in_metadata name")
	}
	if g.rolesClaim == "" {
		g.rolesClaim = config.DefaultRolesClaim
	}
	if g.identityClaim == "" {
		g.identityClaim = config.DefaultIdentityClaim
	}
	return g, nil
}

func (g *envoyJWTGuard) check(_ route.Headers, metadata map[string]*structpb.Struct, _ time.Time) (route.Identity, error) {
	payload := metadata[JWTAuthnNamespace].GetFields()[g.provider].GetStructValue()
	if payload == nil {
		// jwt_authn leaves no payload when the token was missing and the
		// rule allows that (allow_missing); a failed token is refused by
		// Envoy itself unless the rule allows failures too.
		return route.Identity{}, fail(ErrNoCredentials, "Envoy forwarded no verified token payload (jwt_authn payload_in_metadata %q): send a valid Bearer token", g.provider)
	}
	return identityOf(payload.AsMap(), g.identityClaim, g.rolesClaim)
}
