package openapi

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// components hands out references to reusable parts and defines, at the
// end, only the parts something refers to.
type components struct {
	cfg       *config.Config
	b         *config.Binding
	params    map[string]bool
	responses map[string]bool
	headers   map[string]bool
	guards    map[string]bool
}

func newComponents(cfg *config.Config, b *config.Binding) *components {
	return &components{
		cfg: cfg, b: b,
		params: map[string]bool{}, responses: map[string]bool{}, headers: map[string]bool{}, guards: map[string]bool{},
	}
}

func (c *components) parameter(name string) *Parameter {
	c.params[name] = true
	return &Parameter{Ref: "#/components/parameters/" + name}
}

func (c *components) response(name string) *Response {
	c.responses[name] = true
	return &Response{Ref: "#/components/responses/" + name}
}

func (c *components) header(name string) *Header {
	c.headers[name] = true
	return &Header{Ref: "#/components/headers/" + name}
}

func (c *components) build() *Components {
	out := &Components{
		Schemas: map[string]*Schema{"Problem": problemSchema()},
	}
	// Responses first: they refer to headers.
	for _, name := range slices.Sorted(maps.Keys(c.responses)) {
		if out.Responses == nil {
			out.Responses = map[string]*Response{}
		}
		out.Responses[name] = c.responseDef(name)
	}
	for _, name := range slices.Sorted(maps.Keys(c.params)) {
		if out.Parameters == nil {
			out.Parameters = map[string]*Parameter{}
		}
		out.Parameters[name] = c.parameterDef(name)
	}
	for _, name := range slices.Sorted(maps.Keys(c.headers)) {
		if out.Headers == nil {
			out.Headers = map[string]*Header{}
		}
		out.Headers[name] = headerDef(name)
	}
	for _, name := range slices.Sorted(maps.Keys(c.guards)) {
		if out.SecuritySchemes == nil {
			out.SecuritySchemes = map[string]*SecurityScheme{}
		}
		out.SecuritySchemes[name] = securityScheme(c.cfg.Guards[name])
	}
	return out
}

// problemSchema is RFC 9457's problem details object as the processor
// writes it.
func problemSchema() *Schema {
	return &Schema{
		Type:        "object",
		Description: "RFC 9457 problem details. `detail` says, on one line, what to do.",
		Properties: map[string]*Schema{
			"type":     {Type: "string", Format: "uri-reference", Description: "`about:blank`: the problem means no more than its status."},
			"title":    {Type: "string", Description: "The status text."},
			"status":   {Type: "integer", Description: "The HTTP status."},
			"detail":   {Type: "string"},
			"instance": {Type: "string", Format: "uri-reference"},
		},
		Required: []string{"type", "title", "status"},
	}
}

func (c *components) parameterDef(name string) *Parameter {
	maxWait := fmtDuration(c.cfg.Limits.MaxWait)
	switch name {
	case "IfNoneMatch":
		return &Parameter{
			Name: "if-none-match", In: "header",
			Description: "An `etag` of an earlier answer (quoted or not, `W/`, a list, or `*`): 304 Not Modified while the answer still matches.",
			Schema:      &Schema{Type: "string"},
		}
	case "PreferWait":
		return &Parameter{
			Name: "prefer", In: "header",
			Description: "`wait=N` (RFC 7240): with a matching `if-none-match`, hold the request until the answer changes (200) or N seconds pass (304); " +
				"on a missing record, wait for it to appear. N is clamped to limits.max-wait (" + maxWait + ").",
			Schema:  &Schema{Type: "string"},
			Example: "wait=30",
		}
	case "PreferAsync":
		return &Parameter{
			Name: "prefer", In: "header",
			Description: "`respond-async` (RFC 7240): answer 202 Accepted with `location` once the broker acknowledged the request; " +
				"`respond-async, wait=N`: answer with the reply if it comes within N seconds.",
			Schema:  &Schema{Type: "string"},
			Example: "respond-async",
		}
	case "PreferFollowUp":
		return &Parameter{
			Name: "prefer", In: "header",
			Description: "`wait=N` (RFC 7240): wait up to N seconds (at most limits.max-wait, " + maxWait + ") for the reply before answering 202.",
			Schema:      &Schema{Type: "string"},
			Example:     "wait=10",
		}
	case "IdempotencyKey":
		return &Parameter{
			Name: c.b.HTTP.IdempotencyHeader, In: "header",
			Description: "Makes retries safe: the same request sent again with the same key gets the stored reply and produces nothing. " +
				"Without it, a UUID is generated.",
			Schema: &Schema{Type: "string", Pattern: "^[A-Za-z0-9._~-]{1,128}$"},
		}
	}
	panic("openapi: undefined parameter component " + name) // a generator bug, caught by the tests
}

func (c *components) responseDef(name string) *Response {
	l := c.cfg.Limits
	switch name {
	case "NotModified":
		c.headers["ETag"], c.headers["PreferenceApplied"] = true, true
		return &Response{
			Description: "The answer still matches `if-none-match` (with `prefer: wait=N`: it did not change within N seconds).",
			Headers: map[string]*Header{
				"etag":               {Ref: "#/components/headers/ETag"},
				"preference-applied": {Ref: "#/components/headers/PreferenceApplied"},
			},
		}
	case "Unauthorized":
		c.headers["WWWAuthenticate"] = true
		r := problem("No valid credentials: send `authorization: Bearer <JWT>`.")
		r.Headers = map[string]*Header{"www-authenticate": {Ref: "#/components/headers/WWWAuthenticate"}}
		return r
	case "Forbidden":
		return problem("The token lacks a role the route requires.")
	case "ServiceUnavailable":
		c.headers["RetryAfter"] = true
		r := problem(fmt.Sprintf("Kafka is unreachable, the topic is not caught up yet (within limits.kafka-timeout, %s), or the record could not be queued. "+
			"Retry after `retry-after` seconds; with an idempotency key a produce is safe to retry.", fmtDuration(l.KafkaTimeout)))
		r.Headers = map[string]*Header{"retry-after": {Ref: "#/components/headers/RetryAfter"}}
		return r
	case "ContentTooLarge":
		return problem("The body is over limits.max-body (" + config.FormatSize(l.MaxBody) + ").")
	case "BadGateway":
		return problem("The broker refused the record (too large, not authorized, ...), or a reply had an invalid `:status`: `detail` gives the reason.")
	}
	panic("openapi: undefined response component " + name)
}

func headerDef(name string) *Header {
	switch name {
	case "ETag":
		return &Header{Description: "A strong ETag of the answer: it changes exactly when the answer does. Send it back in `if-none-match`.",
			Required: true, Schema: &Schema{Type: "string"}}
	case "PreferenceApplied":
		return &Header{Description: "The preference honoured: `wait=N` with the N used, or `respond-async`.", Schema: &Schema{Type: "string"}}
	case "RetryAfter":
		zero := 0
		return &Header{Description: "Seconds to wait before retrying.", Schema: &Schema{Type: "integer", Minimum: &zero}}
	case "WWWAuthenticate":
		return &Header{Description: "`Bearer`.", Schema: &Schema{Type: "string"}}
	}
	panic("openapi: undefined header component " + name)
}

// securityScheme describes a guard: both kinds take a JWT as a bearer token;
// they differ in who verifies it.
func securityScheme(g *config.Guard) *SecurityScheme {
	s := &SecurityScheme{Type: "http", Scheme: "bearer", BearerFormat: "JWT"}
	if g == nil || g.JWT == nil {
		return s
	}
	o := g.JWT
	var d []string
	if g.Type == "envoy-jwt" {
		d = append(d, "Verified by Envoy's jwt_authn filter")
		if o.Provider != "" {
			d[0] += " (payload_in_metadata `" + o.Provider + "`)"
		}
	} else {
		d = append(d, "Verified by kafka-ext-proc")
	}
	if o.Issuer != "" {
		d = append(d, "issuer `"+o.Issuer+"`")
	}
	if o.Audience != "" {
		d = append(d, "audience `"+o.Audience+"`")
	}
	if len(o.Algorithms) > 0 {
		d = append(d, "algorithms "+strings.Join(o.Algorithms, ", "))
	}
	s.Description = strings.Join(d, "; ") + ". The roles a route lists (as scopes) must all be in the token's `" + o.RolesClaim + "` claim."
	return s
}
