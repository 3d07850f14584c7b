// Package kafkaroute is the Kafka side of a route, shared by the http-kafka
// and grpc-kafka bindings: the values a route's templates resolve from the
// match, the checks of a resolved topic, idempotency keys, the table of
// correlation ids in flight, the cache of compaction probes, and each
// route's cluster and producer, chosen once when the routes are prepared.
//
// The bindings keep only their protocol: reading a request and mapping the
// errors of this package to problem+json or to a gRPC status.
package kafkaroute

import (
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// Refs are the values a route's templates reference: what the match found
// (path parameters, guard identities) and what the request carries or gets
// (idempotency key, correlation id). A reference to a value the binding does
// not have resolves to "" (the loader allows each reference only where it
// exists).
type Refs struct {
	Params         map[string]string // path parameters, percent-decoded
	Identities     map[string]string // guard name → the subject it established
	IdempotencyKey string
	CorrelationID  string
}

// RefsOf reads the path parameters and guard identities of a match.
func RefsOf(m *route.Match) *Refs {
	return &Refs{Params: m.Params, Identities: Identities(m.Identities)}
}

// Resolve expands one template part; pass it to config.Template.Expand.
func (r *Refs) Resolve(p config.TemplatePart) string {
	switch p.Ref {
	case config.RefParam:
		return r.Params[p.Name]
	case config.RefGuardIdentity:
		return r.Identities[p.Name]
	case config.RefIdempotencyKey:
		return r.IdempotencyKey
	case config.RefCorrelationID:
		return r.CorrelationID
	}
	return ""
}

// Identities maps each guard of a matched route to the subject it
// established (nil when no guard did).
func Identities(ids map[string]route.Identity) map[string]string {
	if len(ids) == 0 {
		return nil
	}
	out := make(map[string]string, len(ids))
	for g, id := range ids {
		out[g] = id.Subject
	}
	return out
}
