package config

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

type pendingBinding struct {
	name string
	kn   ast.Node
	typ  BindingType
	m    map[string]*entry
}

func (d *decoder) bindings(n ast.Node, cfg *Config) {
	_, entries, ok := d.mapping(n, "bindings", "binding name")
	if !ok {
		return
	}
	var proxies, remotes []pendingBinding
	// Pass 1: types and kafka clusters, so pass 2 can check every exit.
	for _, e := range entries {
		if !nameRe.MatchString(e.key) {
			d.errorf(e.kn, "binding name %q must start with a letter or digit and use only letters, digits, '.', '_' and '-'", e.key)
		}
		node, fields, ok := d.mapping(e.v, fmt.Sprintf("binding %q", e.key), "key")
		if !ok {
			continue
		}
		typ, ok := d.discriminator(node, fields, "type", "binding type", fmt.Sprintf("binding %q", e.key), d.shape.binding.values()...)
		if !ok {
			// Still report fields no binding type has.
			d.fields(fields, "a binding", d.shape.binding.names()...)
			continue
		}
		m := d.fields(fields, article(typ)+" binding", d.shape.binding.variant(typ).names()...)
		if typ == "kafka" {
			d.kafkaNames[e.key] = true
			d.kind(node, m, typ, "client")
			if kc := d.kafkaCluster(e.key, e.kn, node, m, cfg); kc != nil {
				d.checkRecordBytes(kc, cfg.Limits)
				cfg.Kafka[e.key] = kc
			}
			continue
		}
		if typ == KafkaGRPCType {
			d.kind(node, m, typ, "remote_server")
			d.proxyTypes[e.key] = typ
			remotes = append(remotes, pendingBinding{name: e.key, kn: e.kn, m: m})
			continue
		}
		d.kind(node, m, typ, "proxy")
		d.proxyTypes[e.key] = typ
		proxies = append(proxies, pendingBinding{name: e.key, kn: e.kn, typ: BindingType(typ), m: m})
	}
	for _, p := range proxies {
		cfg.Bindings = append(cfg.Bindings, d.proxyBinding(p, cfg))
	}
	for _, p := range remotes {
		cfg.KafkaGRPC = append(cfg.KafkaGRPC, d.kafkaGRPCBinding(p))
	}
}

func (d *decoder) kind(node ast.Node, m map[string]*entry, typ, want string) {
	e := m["kind"]
	if e == nil {
		d.errorf(node, "missing required field \"kind\": %s binding has kind %s", article(typ), want)
		return
	}
	s, ok := d.literal(e.v, "kind")
	if ok && s != want {
		d.errorf(e.v, "kind of %s binding must be %s, got %q", article(typ), want, s)
	}
}

func (d *decoder) proxyBinding(p pendingBinding, cfg *Config) *Binding {
	b := &Binding{Name: p.name, Type: p.typ, Pos: d.pos(p.kn)}
	var opts ast.Node
	if e := p.m["options"]; e != nil {
		opts = e.v
	}
	switch b.Type {
	case HTTPKafka:
		b.HTTP = d.httpOptions(opts)
	case SSEKafka:
		b.SSE = d.sseOptions(opts)
	default:
		b.GRPC = d.grpcOptions(opts)
	}
	if e := p.m["routes"]; e != nil {
		_, items, ok := d.sequence(e.v, "routes")
		if ok {
			for i, it := range items {
				if it == nil {
					continue
				}
				if r := d.route(b, i, it, cfg); r != nil {
					b.Routes = append(b.Routes, r)
				}
			}
		}
	}
	d.checkRouteIDs(b)
	return b
}

func (d *decoder) httpOptions(n ast.Node) *HTTPOptions {
	o := &HTTPOptions{
		IdempotencyHeader: DefaultIdempotencyKey,
		Correlation:       CorrelationHeaders{ReplyTo: DefaultReplyToHeader, CorrelationID: DefaultCorrelationIDHeader},
	}
	if n == nil {
		return o
	}
	m := d.object(n, "options", "http-kafka options", d.shape.httpOptions.names()...)
	if e := m["idempotency"]; e != nil {
		im := d.object(e.v, "idempotency", "http-kafka options.idempotency", d.shape.httpIdempotency.names()...)
		if h := im["header"]; h != nil {
			d.headerName(h.v, "idempotency.header", &o.IdempotencyHeader)
		}
	}
	if e := m["correlation"]; e != nil {
		d.correlation(e.v, "http-kafka", &o.Correlation, d.shape.httpCorrelation, d.shape.httpCorrelationHeaders)
	}
	return o
}

func (d *decoder) sseOptions(n ast.Node) *SSEOptions {
	o := &SSEOptions{}
	if n == nil {
		return o
	}
	m := d.object(n, "options", "sse-kafka options", d.shape.sseOptions.names()...)
	if e := m["credentials"]; e != nil {
		cn, entries, ok := d.mapping(e.v, "credentials", "key")
		if !ok {
			return o
		}
		cm := d.fields(entries, "sse-kafka options.credentials", d.shape.sseCredentials.names()...)
		if q := cm["query"]; q != nil {
			if s, ok := d.nonEmpty(q.v, "credentials.query"); ok {
				o.CredentialsQuery = s
			}
		}
		if c := cm["cookie"]; c != nil {
			if s, ok := d.nonEmpty(c.v, "credentials.cookie"); ok {
				o.CredentialsCookie = s
			}
		}
		if cm["query"] == nil && cm["cookie"] == nil {
			d.errorf(cn, "credentials needs query, cookie or both: where a guarded route's bearer token is read")
		}
	}
	return o
}

func (d *decoder) grpcOptions(n ast.Node) *GRPCOptions {
	o := &GRPCOptions{
		IdempotencyMetadata: DefaultIdempotencyKey,
		ReliabilityField:    DefaultReliabilityField,
		ReliabilityMetadata: DefaultReliabilityMetadata,
		Correlation: CorrelationHeaders{
			ReplyTo: DefaultReplyToHeader, CorrelationID: DefaultCorrelationIDHeader,
			Service: DefaultServiceHeader, Method: DefaultMethodHeader,
		},
	}
	if n == nil {
		o.Correlation.defaultStatusNames()
		return o
	}
	m := d.object(n, "options", "grpc-kafka options", d.shape.grpcOptions.names()...)
	if e := m["idempotency"]; e != nil {
		im := d.object(e.v, "idempotency", "grpc-kafka options.idempotency", d.shape.grpcIdempotency.names()...)
		if h := im["metadata"]; h != nil {
			d.headerName(h.v, "idempotency.metadata", &o.IdempotencyMetadata)
		}
	}
	if e := m["reliability"]; e != nil {
		rm := d.object(e.v, "reliability", "grpc-kafka options.reliability", d.shape.grpcReliability.names()...)
		if f := rm["field"]; f != nil {
			if v, ok := d.integer(f.v, "reliability.field"); ok {
				switch {
				case v < 1 || v > 536870911:
					d.errorf(f.v, "reliability.field %d is not a protobuf field number: use 1..536870911 (default 32767)", v)
				case v >= 19000 && v <= 19999:
					d.errorf(f.v, "reliability.field %d is in 19000..19999, reserved by protobuf: use another number (default 32767)", v)
				default:
					o.ReliabilityField = int(v)
				}
			}
		}
		if h := rm["metadata"]; h != nil {
			d.headerName(h.v, "reliability.metadata", &o.ReliabilityMetadata)
		}
	}
	if e := m["correlation"]; e != nil {
		d.correlation(e.v, "grpc-kafka", &o.Correlation, d.shape.grpcCorrelation, d.shape.grpcCorrelationHeaders)
	}
	o.Correlation.defaultStatusNames()
	return o
}

// defaultStatusNames names the status and message headers not named: the
// correlation-id header's prefix (up to its last ':', else gateway:) +
// status / message.
func (c *CorrelationHeaders) defaultStatusNames() {
	prefix := c.prefix()
	if c.Status == "" {
		c.Status = prefix + "status"
	}
	if c.Message == "" {
		c.Message = prefix + "message"
	}
}

// prefix is the correlation-id header's prefix, up to its last ':', else
// gateway:.
func (c *CorrelationHeaders) prefix() string {
	if i := strings.LastIndexByte(c.CorrelationID, ':'); i >= 0 {
		return c.CorrelationID[:i+1]
	}
	return "gateway:"
}

// Fingerprint names the header that carries, on every record of a request
// with an idempotency key, the key's use and the request's fingerprint:
// the correlation-id header's prefix + fingerprint (gateway:fingerprint,
// zilla:fingerprint), or, for a correlation-id header without a ':', its
// name + -fingerprint, so that renamed headers keep every gateway: name out
// of the records. It is not configurable: only the processor reads it.
func (c CorrelationHeaders) Fingerprint() string {
	if !strings.Contains(c.CorrelationID, ":") {
		return c.CorrelationID + "-fingerprint"
	}
	return c.prefix() + "fingerprint"
}

func (d *decoder) correlation(n ast.Node, typ string, c *CorrelationHeaders, correlation, headers *section) {
	m := d.object(n, "correlation", typ+" options.correlation", correlation.names()...)
	e := m["headers"]
	if e == nil {
		return
	}
	hm := d.object(e.v, "correlation.headers", typ+" options.correlation.headers", headers.names()...)
	set := func(key string, dst *string) {
		if h := hm[key]; h != nil {
			if s, ok := d.nonEmpty(h.v, "correlation.headers."+key); ok {
				*dst = s
			}
		}
	}
	set("reply-to", &c.ReplyTo)
	set("correlation-id", &c.CorrelationID)
	set("service", &c.Service)
	set("method", &c.Method)
	set("status", &c.Status)
	set("message", &c.Message)
}
