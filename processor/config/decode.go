package config

import (
	"encoding/base64"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Defaults of the fields a file may leave out.
const (
	DefaultIdempotencyKey      = "idempotency-key"
	DefaultReplyToHeader       = "gateway:reply-to"
	DefaultCorrelationIDHeader = "gateway:correlation-id"
	DefaultServiceHeader       = "gateway:service"
	DefaultMethodHeader        = "gateway:method"
	DefaultReliabilityField    = 32767
	DefaultReliabilityMetadata = "last-message-id"
	DefaultRolesClaim          = "scope"
	DefaultIdentityClaim       = "sub"
	DefaultSkew                = 30 * time.Second
)

// DefaultAlgorithms are the JWT algorithms a jwt guard accepts when the file
// lists none: every asymmetric JOSE algorithm. HMAC (HS*) must be listed
// explicitly, so a public key can never be used as a shared secret.
func DefaultAlgorithms() []string {
	return []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
}

// jwtAlgorithms are the algorithms a jwt guard may list.
func jwtAlgorithms() []string { return append(DefaultAlgorithms(), "HS256", "HS384", "HS512") }

var (
	nameRe        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	headerRe      = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
	grpcServiceRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	grpcMethodRe  = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)/([A-Za-z_][A-Za-z0-9_]*|\*)$`)
)

// httpMethods are the methods a condition may name; CONNECT (no path) is refused apart.
func httpMethods() []string {
	return []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"}
}

func (d *decoder) top(body ast.Node) *Config {
	node, entries, ok := d.mapping(body, "the file", "key")
	if !ok {
		return nil
	}
	m := d.fields(entries, "the top level", "bindings", "guards", "limits", "catalogs")
	cfg := &Config{
		Source:   d.file,
		Kafka:    map[string]*KafkaCluster{},
		Guards:   map[string]*Guard{},
		Limits:   DefaultLimits(),
		Catalogs: map[string]*Catalog{},
	}
	d.guardNames = map[string]bool{}
	d.proxyTypes = map[string]string{}
	d.kafkaNames = map[string]bool{}
	// Guards first: routes check their guard references against them.
	if e := m["guards"]; e != nil {
		d.guards(e.v, cfg)
	}
	if e := m["limits"]; e != nil {
		d.limits(e.v, &cfg.Limits)
	}
	// Catalogs before bindings: topic models name them.
	if e := m["catalogs"]; e != nil {
		d.catalogs(e.v, cfg)
	}
	if e := m["bindings"]; e != nil {
		d.bindings(e.v, cfg)
		d.checkGRPCModels(cfg)
	} else {
		d.errorf(node, "missing required field \"bindings\": declare at least one kafka binding and one http-kafka or grpc-kafka binding")
	}
	return cfg
}

// ---- bindings

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
	var proxies []pendingBinding
	// Pass 1: types and kafka clusters, so pass 2 can check every exit.
	for _, e := range entries {
		if !nameRe.MatchString(e.key) {
			d.errorf(e.kn, "binding name %q must start with a letter or digit and use only letters, digits, '.', '_' and '-'", e.key)
		}
		node, fields, ok := d.mapping(e.v, fmt.Sprintf("binding %q", e.key), "key")
		if !ok {
			continue
		}
		typ, ok := d.discriminator(node, fields, "type", "binding type", fmt.Sprintf("binding %q", e.key), "kafka", "http-kafka", "grpc-kafka")
		if !ok {
			// Still report fields no binding type has.
			d.fields(fields, "a binding", "type", "kind", "options", "routes")
			continue
		}
		var m map[string]*entry
		switch typ {
		case "kafka":
			d.kafkaNames[e.key] = true
			m = d.fields(fields, "a kafka binding", "type", "kind", "options")
			d.kind(node, m, typ, "client")
			if kc := d.kafkaCluster(e.key, e.kn, node, m, cfg); kc != nil {
				d.checkRecordBytes(kc, cfg.Limits)
				cfg.Kafka[e.key] = kc
			}
			continue
		case "http-kafka":
			m = d.fields(fields, "an http-kafka binding", "type", "kind", "options", "routes")
		case "grpc-kafka":
			m = d.fields(fields, "a grpc-kafka binding", "type", "kind", "options", "routes")
		}
		d.kind(node, m, typ, "proxy")
		d.proxyTypes[e.key] = typ
		proxies = append(proxies, pendingBinding{name: e.key, kn: e.kn, typ: BindingType(typ), m: m})
	}
	for _, p := range proxies {
		cfg.Bindings = append(cfg.Bindings, d.proxyBinding(p, cfg))
	}
}

// discriminator reads a field that selects the shape of its object (binding
// and guard type, capability). It is taken literally: a reference there would
// leave the rest of the object unreadable.
func (d *decoder) discriminator(node ast.Node, fields []entry, key, noun, owner string, allowed ...string) (string, bool) {
	var e *entry
	for i := range fields {
		if fields[i].key == key {
			e = &fields[i]
		}
	}
	if e == nil {
		d.errorf(node, "missing required field %q in %s; allowed values: %s", key, owner, strings.Join(allowed, ", "))
		return "", false
	}
	s, ok := d.literal(e.v, key)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		d.errorf(e.v, "unknown %s %q; allowed: %s", noun, s, strings.Join(allowed, ", "))
		return "", false
	}
	return s, true
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

func (d *decoder) kafkaCluster(name string, kn, node ast.Node, m map[string]*entry, cfg *Config) *KafkaCluster {
	kc := &KafkaCluster{Name: name, Properties: map[string]string{}, Pos: d.pos(kn), PropertyPos: map[string]Pos{}}
	e := m["options"]
	if e == nil {
		d.errorf(node, "missing required field \"options\": a kafka binding needs at least options.bootstrap.servers")
		return nil
	}
	on, entries, ok := d.mapping(e.v, "options", "property")
	if !ok {
		return nil
	}
	ok = true
	for _, p := range entries {
		if p.key == "topics" {
			// Not a librdkafka property: the topics' models.
			kc.Topics = d.topics(p.v, cfg)
			continue
		}
		if p.v != nil {
			kc.PropertyPos[p.key] = d.pos(p.v)
		}
		switch p.v.(type) {
		case *ast.StringNode, *ast.LiteralNode:
			s, good := d.str(p.v, p.key)
			if good && s == "" && (p.key == "bootstrap.servers" || p.key == "metadata.broker.list") {
				d.errorf(p.v, "%s must not be empty: list the brokers to connect to, e.g. localhost:9092", p.key)
				good = false
			}
			ok = ok && good
			kc.Properties[p.key] = s
		case nil:
			ok = false
		default:
			s, good := scalarText(p.v)
			if !good {
				d.errorf(p.v, "kafka property %q must be a string, number or boolean, got %s", p.key, describe(p.v))
				ok = false
				continue
			}
			kc.Properties[p.key] = s
		}
	}
	// metadata.broker.list is librdkafka's other name for bootstrap.servers.
	_, bs := kc.Properties["bootstrap.servers"]
	_, mbl := kc.Properties["metadata.broker.list"]
	if ok && !bs && !mbl {
		d.errorf(on, "missing required property \"bootstrap.servers\": the brokers to connect to, e.g. localhost:9092")
		ok = false
	}
	if !ok {
		return nil
	}
	return kc
}

// checkRecordBytes refuses a message.max.bytes below what a request within
// the limits writes: librdkafka would refuse such a record itself.
func (d *decoder) checkRecordBytes(kc *KafkaCluster, l Limits) {
	v, ok := kc.Properties["message.max.bytes"]
	if !ok {
		return
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n >= l.RecordBytes() {
		return // librdkafka's own check reports a value that is not a number
	}
	d.errs = append(d.errs, &Error{Pos: kc.PropertyPos["message.max.bytes"], Msg: fmt.Sprintf(
		"kafka property \"message.max.bytes\" is %d bytes, below limits.max-body (%d bytes) plus %d bytes for the key and headers: "+
			"the producer would refuse records of requests the limits let through; remove it (it is then set to %d) or lower limits.max-body",
		n, l.MaxBody, RecordHeaderRoom, l.RecordBytes())})
}

func (d *decoder) proxyBinding(p pendingBinding, cfg *Config) *Binding {
	b := &Binding{Name: p.name, Type: p.typ, Pos: d.pos(p.kn)}
	var opts ast.Node
	if e := p.m["options"]; e != nil {
		opts = e.v
	}
	if b.Type == HTTPKafka {
		b.HTTP = d.httpOptions(opts)
	} else {
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

// ---- options

func (d *decoder) httpOptions(n ast.Node) *HTTPOptions {
	o := &HTTPOptions{
		IdempotencyHeader: DefaultIdempotencyKey,
		Correlation:       CorrelationHeaders{ReplyTo: DefaultReplyToHeader, CorrelationID: DefaultCorrelationIDHeader},
	}
	if n == nil {
		return o
	}
	m := d.object(n, "options", "http-kafka options", "idempotency", "correlation")
	if e := m["idempotency"]; e != nil {
		im := d.object(e.v, "idempotency", "http-kafka options.idempotency", "header")
		if h := im["header"]; h != nil {
			d.headerName(h.v, "idempotency.header", &o.IdempotencyHeader)
		}
	}
	if e := m["correlation"]; e != nil {
		d.correlation(e.v, "http-kafka", &o.Correlation, "reply-to", "correlation-id")
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
	m := d.object(n, "options", "grpc-kafka options", "idempotency", "reliability", "correlation")
	if e := m["idempotency"]; e != nil {
		im := d.object(e.v, "idempotency", "grpc-kafka options.idempotency", "metadata")
		if h := im["metadata"]; h != nil {
			d.headerName(h.v, "idempotency.metadata", &o.IdempotencyMetadata)
		}
	}
	if e := m["reliability"]; e != nil {
		rm := d.object(e.v, "reliability", "grpc-kafka options.reliability", "field", "metadata")
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
		d.correlation(e.v, "grpc-kafka", &o.Correlation, "service", "method", "correlation-id", "reply-to", "status", "message")
	}
	o.Correlation.defaultStatusNames()
	return o
}

// defaultStatusNames names the status and message headers not named: the
// correlation-id header's prefix (up to its last ':', else gateway:) +
// status / message.
func (c *CorrelationHeaders) defaultStatusNames() {
	prefix := "gateway:"
	if i := strings.LastIndexByte(c.CorrelationID, ':'); i >= 0 {
		prefix = c.CorrelationID[:i+1]
	}
	if c.Status == "" {
		c.Status = prefix + "status"
	}
	if c.Message == "" {
		c.Message = prefix + "message"
	}
}

func (d *decoder) correlation(n ast.Node, typ string, c *CorrelationHeaders, allowed ...string) {
	m := d.object(n, "correlation", typ+" options.correlation", "headers")
	e := m["headers"]
	if e == nil {
		return
	}
	hm := d.object(e.v, "correlation.headers", typ+" options.correlation.headers", allowed...)
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

// object is mapping + fields for nested objects with a fixed set of keys.
func (d *decoder) object(n ast.Node, field, where string, allowed ...string) map[string]*entry {
	_, entries, ok := d.mapping(n, field, "key")
	if !ok {
		return map[string]*entry{}
	}
	return d.fields(entries, where, allowed...)
}

// headerName reads an HTTP header or gRPC metadata name, lower-cased as
// HTTP/2 and Envoy carry them.
func (d *decoder) headerName(n ast.Node, field string, dst *string) bool {
	s, ok := d.str(n, field)
	if !ok {
		return false
	}
	if !headerRe.MatchString(s) {
		d.errorf(n, "%s %q is not a valid header name: use letters, digits and '-'", field, s)
		return false
	}
	*dst = strings.ToLower(s)
	return true
}

// ---- routes

// routeCtx carries what a route's checks need after all its fields are read:
// `when` may follow `with` in the file.
type routeCtx struct {
	b         *Binding
	r         *Route
	guarded   map[string]bool
	uses      []templateUse
	pathNodes []ast.Node // by condition index; nil when the condition has no usable path
	pathGiven []bool     // by condition index: a path was written, usable or not
	methNodes []ast.Node // by condition index

	hasAsync, hasReplyTo bool // written, usable or not: no follow-on errors for broken ones
}

type templateUse struct {
	node  ast.Node
	field string
	t     Template
}

func (d *decoder) route(b *Binding, idx int, n ast.Node, cfg *Config) *Route {
	where := "an http-kafka route"
	if b.Type == GRPCKafka {
		where = "a grpc-kafka route"
	}
	node, entries, ok := d.mapping(n, fmt.Sprintf("routes[%d]", idx), "key")
	if !ok {
		return nil
	}
	m := d.fields(entries, where, "id", "guarded", "when", "exit", "with")
	r := &Route{Index: idx, Pos: d.pos(node)}
	rc := &routeCtx{b: b, r: r, guarded: map[string]bool{}}
	if e := m["id"]; e != nil {
		d.routeID(e.v, r)
	}
	if e := m["guarded"]; e != nil {
		d.guarded(e.v, rc)
	}
	if e := m["when"]; e != nil {
		if _, items, ok := d.sequence(e.v, "when"); ok {
			for _, it := range items {
				if it == nil {
					continue
				}
				if b.Type == HTTPKafka {
					d.httpCondition(it, rc)
				} else {
					d.grpcCondition(it, rc)
				}
			}
		}
	}
	if e := m["exit"]; e != nil {
		if s, ok := d.nonEmpty(e.v, "exit"); ok {
			r.Exit = s
			d.checkExit(e.v, s)
		}
	} else {
		d.errorf(node, "missing required field \"exit\": name the kafka binding this route uses")
	}
	if e := m["with"]; e != nil {
		r.With = d.with(e.v, rc)
	} else {
		d.errorf(node, "missing required field \"with\": give the route's capability (fetch or produce) and topic")
	}
	d.checkRoute(rc)
	return r
}

// maxRouteID bounds a route id: it is a metric label and a span attribute.
const maxRouteID = 128

func (d *decoder) routeID(n ast.Node, r *Route) {
	s, ok := d.nonEmpty(n, "id")
	if !ok {
		return
	}
	if len(s) > maxRouteID {
		d.errorf(n, "id is %d bytes long; at most %d: it names the route in metrics", len(s), maxRouteID)
		return
	}
	for _, c := range s {
		if c < ' ' || c == 0x7f {
			d.errorf(n, "id %q holds a control character", s)
			return
		}
	}
	r.ID = s
	r.IDPos = d.pos(n)
}

// checkRouteIDs gives routes without an id their default one and checks
// that no two routes of the binding share an id: ids label metrics, and two
// routes counted as one would hide one of them. Routes whose default ids
// collide (one condition, told apart by their guards) add their
// capability:topic to it, which tells them apart without their positions.
func (d *decoder) checkRouteIDs(b *Binding) {
	defaults := map[string]int{}
	for _, r := range b.Routes {
		if r.ID == "" {
			defaults[DefaultRouteID(r)]++
		}
	}
	for _, r := range b.Routes {
		if r.ID == "" {
			r.ID = DefaultRouteID(r)
			if defaults[r.ID] > 1 && r.With != nil {
				r.ID += " " + string(r.With.Capability) + ":" + r.With.Topic.Raw
			}
		}
	}
	seen := map[string]*Route{}
	for _, r := range b.Routes {
		first, dup := seen[r.ID]
		if !dup {
			seen[r.ID] = r
			continue
		}
		at, how := r.Pos, "its default id"
		if r.IDPos != (Pos{}) {
			at, how = r.IDPos, "its id"
		}
		d.errs = append(d.errs, &Error{Pos: at, Msg: fmt.Sprintf(
			"routes[%d]: %s %q is also routes[%d]'s (line %d): route ids label metrics and must be unique in a binding; give one of them an `id`",
			r.Index, how, r.ID, first.Index, first.Pos.Line)})
	}
}

func (d *decoder) checkExit(n ast.Node, name string) {
	if d.kafkaNames[name] {
		return
	}
	var kafka []string
	for k := range d.kafkaNames {
		kafka = append(kafka, k)
	}
	sort.Strings(kafka)
	names := "the file declares none"
	if len(kafka) > 0 {
		names = "declared: " + strings.Join(kafka, ", ")
	}
	if t, ok := d.proxyTypes[name]; ok {
		d.errorf(n, "exit %q is %s binding: exit must name a kafka binding (%s)", name, article(t), names)
		return
	}
	d.errorf(n, "exit %q names no kafka binding (%s)", name, names)
}

func (d *decoder) guarded(n ast.Node, rc *routeCtx) {
	_, entries, ok := d.mapping(n, "guarded", "guard name")
	if !ok {
		return
	}
	for _, e := range entries {
		if !d.guardNames[e.key] {
			var names []string
			for g := range d.guardNames {
				names = append(names, g)
			}
			sort.Strings(names)
			if len(names) == 0 {
				d.errorf(e.kn, "guard %q is not defined: the file has no guards", e.key)
			} else {
				d.errorf(e.kn, "guard %q is not defined; defined guards: %s", e.key, strings.Join(names, ", "))
			}
		}
		rc.guarded[e.key] = true
		req := GuardRequirement{Guard: e.key, Roles: []string{}}
		field := fmt.Sprintf("roles of guard %q", e.key)
		if _, ok := e.v.(*ast.NullNode); ok {
			d.errorf(e.v, "%s must be a sequence of strings ([] for none), got nothing (null)", field)
			continue
		}
		_, items, ok := d.sequence(e.v, field)
		if !ok {
			continue
		}
		for _, it := range items {
			if it == nil {
				continue
			}
			if s, ok := d.nonEmpty(it, "a role"); ok {
				req.Roles = append(req.Roles, s)
			}
		}
		rc.r.Guarded = append(rc.r.Guarded, req)
	}
	sort.Slice(rc.r.Guarded, func(i, j int) bool { return rc.r.Guarded[i].Guard < rc.r.Guarded[j].Guard })
}

func (d *decoder) httpCondition(n ast.Node, rc *routeCtx) {
	node, entries, ok := d.mapping(n, "a when entry", "key")
	if !ok {
		return
	}
	m := d.fields(entries, "an http-kafka condition", "method", "path")
	c := Condition{Pos: d.pos(node)}
	var pathNode, methNode ast.Node
	if e := m["method"]; e != nil {
		if s, ok := d.str(e.v, "method"); ok {
			switch {
			case s == "CONNECT":
				d.errorf(e.v, "method CONNECT cannot be routed: a CONNECT request has no path, and the processor answers it 404")
			case slices.Contains(httpMethods(), s):
				c.Method = s
				methNode = e.v
			case slices.Contains(httpMethods(), strings.ToUpper(s)):
				d.errorf(e.v, "method %q must be upper case: %s", s, strings.ToUpper(s))
			default:
				d.errorf(e.v, "unknown method %q; allowed: %s", s, strings.Join(httpMethods(), ", "))
			}
		}
	}
	if e := m["path"]; e != nil {
		if s, ok := d.str(e.v, "path"); ok {
			pt, err := ParsePathTemplate(s)
			if err != nil {
				d.errorf(e.v, "%v", err)
			} else {
				c.Path = pt
				pathNode = e.v
			}
		}
	}
	rc.r.When = append(rc.r.When, c)
	rc.pathNodes = append(rc.pathNodes, pathNode)
	rc.pathGiven = append(rc.pathGiven, m["path"] != nil)
	rc.methNodes = append(rc.methNodes, methNode)
}

func (d *decoder) grpcCondition(n ast.Node, rc *routeCtx) {
	node, entries, ok := d.mapping(n, "a when entry", "key")
	if !ok {
		return
	}
	m := d.fields(entries, "a grpc-kafka condition", "method", "service", "metadata")
	c := Condition{Pos: d.pos(node)}
	if e := m["method"]; e != nil {
		if s, ok := d.str(e.v, "method"); ok {
			if grpcMethodRe.MatchString(s) {
				c.GRPCMethod = s
			} else {
				d.errorf(e.v, "gRPC method %q must be shaped <package>.<Service>/<Method> or <package>.<Service>/* (no leading \"/\")", s)
			}
		}
	}
	if e := m["service"]; e != nil {
		if s, ok := d.str(e.v, "service"); ok {
			switch {
			case !grpcServiceRe.MatchString(s):
				d.errorf(e.v, "gRPC service %q must be a fully qualified service name such as example.v1.Items", s)
			case c.GRPCMethod != "" && !strings.HasPrefix(c.GRPCMethod, s+"/"):
				d.errorf(e.v, "service %q contradicts method %q: the condition could never match; keep one of them", s, c.GRPCMethod)
			default:
				c.Service = s
			}
		}
	}
	if e := m["metadata"]; e != nil {
		_, entries, ok := d.mapping(e.v, "metadata", "metadata name")
		if ok {
			seen := map[string]ast.Node{}
			for _, me := range entries {
				// Metadata names ignore case, as HTTP/2 header names do.
				if prev, dup := seen[strings.ToLower(me.key)]; dup {
					p := d.pos(prev)
					d.errorf(me.kn, "duplicate metadata name %q (names ignore case): first defined at line %d, column %d", me.key, p.Line, p.Col)
					continue
				}
				seen[strings.ToLower(me.key)] = me.kn
				if mm, ok := d.metadata(me); ok {
					c.Metadata = append(c.Metadata, mm)
				}
			}
		}
	}
	rc.r.When = append(rc.r.When, c)
	rc.pathNodes = append(rc.pathNodes, nil)
	rc.pathGiven = append(rc.pathGiven, false)
	rc.methNodes = append(rc.methNodes, nil)
}

// metadata reads one `metadata` entry. Binary (-bin) metadata is compared by
// its decoded bytes, so it must be given as {base64: ...}; {base64: ...} on a
// name without -bin, as Zilla writes it, names the <name>-bin metadata.
func (d *decoder) metadata(e entry) (MetadataMatch, bool) {
	name := strings.ToLower(e.key)
	if !headerRe.MatchString(name) {
		d.errorf(e.kn, "metadata name %q is not a valid header name: use letters, digits and '-'", e.key)
		return MetadataMatch{}, false
	}
	binary := strings.HasSuffix(name, "-bin")
	switch e.v.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		m := d.object(e.v, "metadata "+e.key, "a binary metadata value", "base64")
		b := m["base64"]
		if b == nil {
			d.errorf(e.v, "missing required field \"base64\" in the value of metadata %q", e.key)
			return MetadataMatch{}, false
		}
		s, ok := d.str(b.v, "base64")
		if !ok {
			return MetadataMatch{}, false
		}
		if !binary {
			// Zilla's gRPC server strips -bin from binary metadata names, so
			// its conditions name binary metadata without it: this one
			// matches the metadata a client sends as <name>-bin.
			name += "-bin"
		}
		v, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			v, err = base64.RawStdEncoding.DecodeString(s)
		}
		if err != nil {
			d.errorf(b.v, "metadata %q: %q is not valid base64 (standard alphabet, padding optional)", e.key, s)
			return MetadataMatch{}, false
		}
		return MetadataMatch{Name: name, Value: v, Binary: true}, true
	case nil:
		return MetadataMatch{}, false
	}
	s, ok := d.str(e.v, "metadata "+e.key)
	if !ok {
		return MetadataMatch{}, false
	}
	if binary {
		d.errorf(e.v, "metadata %q is binary: give its value as {base64: ...}", e.key)
		return MetadataMatch{}, false
	}
	return MetadataMatch{Name: name, Value: []byte(s)}, true
}

// ---- with

func (d *decoder) with(n ast.Node, rc *routeCtx) *With {
	node, entries, ok := d.mapping(n, "with", "key")
	if !ok {
		return nil
	}
	http := rc.b.Type == HTTPKafka
	capStr, ok := d.discriminator(node, entries, "capability", "capability", "with", "fetch", "produce")
	if !ok {
		// Still report fields neither capability has (typos such as "capabilty").
		union := []string{"capability", "topic", "topic-pattern", "filters", "acks", "key", "overrides", "reply-to"}
		where := "the with of a grpc-kafka route"
		if http {
			union = append(union, "merge", "async")
			where = "the with of an http-kafka route"
		}
		d.fields(entries, where, union...)
		return nil
	}
	w := &With{Capability: Capability(capStr), Pos: d.pos(node)}
	where := "the with of a grpc-kafka " + capStr + " route"
	if http {
		where = "the with of an http-kafka " + capStr + " route"
	}
	m := d.fields(entries, where, withFields(w.Capability, http)...)

	// Per-request references each field may hold; see the table on Parse.
	topicRefs := allowGuardIdentity
	if http {
		topicRefs |= allowParams
	} else {
		topicRefs |= inGRPCRoute
	}
	d.withTopic(node, m, w, topicRefs, rc)
	switch w.Capability {
	case Fetch:
		d.withFetch(node, m, w, topicRefs, rc)
	case Produce:
		d.withProduce(m, w, topicRefs|allowIdempotencyKey, rc)
	}
	return w
}

// withFields are the fields a with of the capability may have.
func withFields(c Capability, http bool) []string {
	allowed := []string{"capability", "topic", "topic-pattern"}
	switch {
	case c == Fetch && http:
		allowed = append(allowed, "filters", "merge")
	case c == Fetch:
		allowed = append(allowed, "filters")
	case http:
		allowed = append(allowed, "acks", "key", "overrides", "reply-to", "async")
	default:
		allowed = append(allowed, "acks", "key", "overrides", "reply-to")
	}
	return allowed
}

// withTopic decodes topic and topic-pattern.
func (d *decoder) withTopic(node ast.Node, m map[string]*entry, w *With, topicRefs refSet, rc *routeCtx) {
	if e := m["topic"]; e != nil {
		if t, ok := d.use(e.v, "topic", topicRefs, rc); ok {
			w.Topic = t
			d.checkTopic(e.v, t, m["topic-pattern"] != nil)
		}
	} else {
		d.errorf(node, "missing required field \"topic\": the Kafka topic of this route")
	}
	if e := m["topic-pattern"]; e != nil {
		if s, ok := d.nonEmpty(e.v, "topic-pattern"); ok {
			if _, err := path.Match(s, ""); err != nil {
				d.errorf(e.v, "topic-pattern %q is not a valid glob: use *, ? and [...] classes", s)
			} else {
				w.TopicPattern = s
			}
		}
	}
}

// withFetch decodes the fields of a fetch route's with.
func (d *decoder) withFetch(node ast.Node, m map[string]*entry, w *With, topicRefs refSet, rc *routeCtx) {
	if e := m["filters"]; e != nil {
		w.Filters = d.filters(e.v, topicRefs, rc)
	}
	if e := m["merge"]; e != nil {
		w.Merge = d.merge(e.v)
	}
	if rc.b.Type == HTTPKafka && m["filters"] == nil && m["merge"] == nil {
		d.errorf(node, "a fetch route needs filters (records selected by key or headers) or merge (all records as one JSON array)")
	}
}

// withProduce decodes the fields of a produce route's with.
func (d *decoder) withProduce(m map[string]*entry, w *With, keyRefs refSet, rc *routeCtx) {
	w.Acks = AcksInSyncReplicas
	if e := m["acks"]; e != nil {
		if s, ok := d.str(e.v, "acks"); ok {
			switch a := Acks(s); a {
			case AcksNone, AcksLeaderOnly, AcksInSyncReplicas:
				w.Acks = a
			default:
				d.errorf(e.v, "unknown acks %q; allowed: none, leader_only, in_sync_replicas", s)
			}
		}
	}
	if e := m["key"]; e != nil {
		if t, ok := d.use(e.v, "key", keyRefs, rc); ok {
			if t.Raw == "" {
				def := "records without a key"
				if rc.b.Type != HTTPKafka {
					def = "the correlation id as key"
				}
				d.errorf(e.v, "key must not be empty: omit it for %s", def)
			} else {
				w.Key = &t
			}
		}
	}
	if e := m["overrides"]; e != nil {
		w.Overrides = d.headerTemplates(e.v, "overrides", keyRefs, rc, false)
	}
	if e := m["reply-to"]; e != nil {
		if s, ok := d.nonEmpty(e.v, "reply-to"); ok {
			w.ReplyTo = s
			d.checkTopic(e.v, Template{Raw: s, Parts: []TemplatePart{{Literal: s}}}, false)
		}
	}
	if e := m["async"]; e != nil {
		rc.hasAsync = true
		d.async(e, w, rc)
		if m["reply-to"] == nil {
			d.errorf(e.kn, "async needs reply-to: the reply the client fetches later is read from that topic")
		}
	}
	rc.hasReplyTo = m["reply-to"] != nil
}

// use parses a template of a route and remembers it for the route's checks.
func (d *decoder) use(n ast.Node, field string, allow refSet, rc *routeCtx) (Template, bool) {
	t, ok := d.template(n, field, allow)
	if ok {
		rc.uses = append(rc.uses, templateUse{node: n, field: field, t: t})
	}
	return t, ok
}

// checkTopic validates a static topic name, or requires topic-pattern for a
// templated one: a name built from the request is checked against that glob
// at request time, so a client cannot reach any topic it can name.
func (d *decoder) checkTopic(n ast.Node, t Template, hasPattern bool) {
	if !t.Static() {
		if !hasPattern {
			d.errorf(n, "topic %q is templated: add topic-pattern, a glob every resolved name must match (e.g. \"items-*\")", t.Raw)
		}
		return
	}
	name := t.Raw
	switch {
	case name == "":
		d.errorf(n, "topic must not be empty")
	case strings.HasPrefix(name, "_"):
		d.errorf(n, "topic %q starts with \"_\": such names are internal to Kafka and always refused", name)
	case !LegalTopic(name):
		d.errorf(n, "%q is not a valid Kafka topic name: use up to 249 letters, digits, '.', '_' and '-'", name)
	}
}

func (d *decoder) filters(n ast.Node, refs refSet, rc *routeCtx) []Filter {
	sn, items, ok := d.sequence(n, "filters")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.errorf(sn, "filters must not be empty: add a filter with key or headers, or remove filters")
	}
	var out []Filter
	for _, it := range items {
		if it == nil {
			continue
		}
		node, entries, ok := d.mapping(it, "a filter", "key")
		if !ok {
			continue
		}
		m := d.fields(entries, "a filter", "key", "headers")
		var f Filter
		if e := m["key"]; e != nil {
			if t, ok := d.use(e.v, "filter key", refs, rc); ok {
				f.Key = &t
			}
		}
		if e := m["headers"]; e != nil {
			f.Headers = d.headerTemplates(e.v, "filter headers", refs, rc, false)
		}
		if m["key"] == nil && m["headers"] == nil {
			d.errorf(node, "a filter needs key, headers or both")
		}
		out = append(out, f)
	}
	return out
}

// headerTemplates reads a map of header name to templated value, in file
// order. HTTP response headers (lower) are lower-cased; Kafka header names
// keep their case.
func (d *decoder) headerTemplates(n ast.Node, field string, refs refSet, rc *routeCtx, lower bool) []HeaderTemplate {
	_, entries, ok := d.mapping(n, field, "header name")
	if !ok {
		return nil
	}
	var out []HeaderTemplate
	seen := map[string]ast.Node{}
	for _, e := range entries {
		name := e.key
		if name == "" {
			d.errorf(e.kn, "%s: a header name must not be empty", field)
			continue
		}
		if lower {
			if !headerRe.MatchString(name) {
				d.errorf(e.kn, "%s: %q is not a valid header name: use letters, digits and '-'", field, name)
				continue
			}
			name = strings.ToLower(name)
			if prev, dup := seen[name]; dup {
				p := d.pos(prev)
				d.errorf(e.kn, "duplicate header name %q (header names ignore case): first defined at line %d, column %d", e.key, p.Line, p.Col)
				continue
			}
			seen[name] = e.kn
		}
		if e.v == nil {
			continue
		}
		if t, ok := d.use(e.v, fmt.Sprintf("%s %s", field, e.key), refs, rc); ok {
			out = append(out, HeaderTemplate{Name: name, Value: t})
		}
	}
	return out
}

func (d *decoder) merge(n ast.Node) *Merge {
	m := d.object(n, "merge", "merge", "content-type", "patch")
	mg := &Merge{ContentType: "application/json", PatchInitial: "[]", PatchPath: "/-"}
	ok := true
	if e := m["content-type"]; e != nil {
		if s, good := d.str(e.v, "merge.content-type"); good && s != "application/json" {
			d.errorf(e.v, "merge.content-type must be application/json, got %q", s)
			ok = false
		}
	}
	if e := m["patch"]; e != nil {
		pn, entries, good := d.mapping(e.v, "merge.patch", "key")
		if good {
			pm := d.fields(entries, "merge.patch", "initial", "path")
			if i := pm["initial"]; i != nil {
				ok = d.patchInitial(i.v) && ok
			} else {
				d.errorf(pn, "missing required field \"initial\" in merge.patch: it must be []")
				ok = false
			}
			if p := pm["path"]; p != nil {
				if s, good := d.str(p.v, "merge.patch.path"); good && s != "/-" {
					d.errorf(p.v, "merge.patch.path must be \"/-\" (append each record), got %q", s)
					ok = false
				}
			} else {
				d.errorf(pn, "missing required field \"path\" in merge.patch: it must be \"/-\"")
				ok = false
			}
		}
	}
	if !ok {
		return nil
	}
	return mg
}

// patchInitial accepts [] or the string "[]": the merged answer starts as an
// empty JSON array.
func (d *decoder) patchInitial(n ast.Node) bool {
	switch v := n.(type) {
	case nil:
		return false
	case *ast.SequenceNode:
		if len(v.Values) == 0 {
			return true
		}
	case *ast.StringNode, *ast.LiteralNode:
		s, ok := d.str(n, "merge.patch.initial")
		if !ok {
			return false
		}
		if strings.TrimSpace(s) == "[]" {
			return true
		}
		d.errorf(n, "merge.patch.initial must be [] (an empty JSON array), got %q", s)
		return false
	}
	d.errorf(n, "merge.patch.initial must be [] (an empty JSON array), got %s", describe(n))
	return false
}

func (d *decoder) async(e *entry, w *With, rc *routeCtx) {
	node, entries, ok := d.mapping(e.v, "async", "header name")
	if !ok {
		return
	}
	w.Async = d.headerTemplates(node, "async", allowParams|allowCorrelationID, rc, true)
	// A location that failed to parse was reported already.
	hasLocation := false
	for _, x := range entries {
		if strings.EqualFold(x.key, "location") {
			hasLocation = true
		}
	}
	for _, h := range w.Async {
		if h.Name == "location" && !h.Value.HasRef(RefCorrelationID) {
			for _, x := range entries {
				if strings.EqualFold(x.key, "location") {
					d.errorf(x.v, "async location must contain ${correlationId}: the client fetches the reply there")
				}
			}
		}
	}
	if !hasLocation {
		d.errorf(node, "async needs a location containing ${correlationId}, e.g. location: /items/${params.id};cid=${correlationId}")
	}
}

// checkRoute runs the checks that need the whole route.
func (d *decoder) checkRoute(rc *routeCtx) {
	r := rc.r
	for _, u := range rc.uses {
		for _, p := range u.t.Parts {
			switch p.Ref {
			case RefParam:
				d.checkParam(u, p.Name, rc)
			case RefGuardIdentity:
				ref := TemplatePart{Ref: RefGuardIdentity, Name: p.Name}.ref()
				if !d.guardNames[p.Name] {
					d.errorf(u.node, "%s in %s names guard %q, which is not defined", ref, u.field, p.Name)
				} else if !rc.guarded[p.Name] {
					d.errorf(u.node, "%s in %s names guard %q, which this route does not list in guarded", ref, u.field, p.Name)
				}
			}
		}
	}
	w := r.With
	if w == nil {
		return // a missing or broken with is reported already; these checks need it
	}
	followUp := w.Capability == Produce && rc.hasReplyTo && rc.hasAsync
	for i, c := range r.When {
		if c.Path != nil && c.Path.HasParam("correlationId") && (!followUp || c.Method != "GET") {
			d.errorf(rc.pathNodes[i], "{correlationId} may only appear in a GET condition of a produce route with reply-to and async (the follow-up of an async request)")
		}
		if w.Capability == Fetch && c.Method != "" && c.Method != "GET" && c.Method != "HEAD" {
			d.errorf(rc.methNodes[i], "a fetch route answers GET and HEAD: method %s cannot fetch", c.Method)
		}
	}
}

// checkParam requires ${params.name} to be defined by every when path of its
// route: otherwise some matching requests would have no value for it.
func (d *decoder) checkParam(u templateUse, name string, rc *routeCtx) {
	if rc.b.Type == GRPCKafka {
		return // refused by the template's reference set already
	}
	if len(rc.r.When) == 0 {
		d.errorf(u.node, "${params.%s} in %s needs a when path with {%s}: this route has no when conditions", name, u.field, name)
		return
	}
	for i, c := range rc.r.When {
		if c.Path == nil {
			if !rc.pathGiven[i] {
				d.errorf(u.node, "${params.%s} in %s is not defined by every when path of this route: the condition at line %d has no path", name, u.field, c.Pos.Line)
			}
			return
		}
		if !c.Path.HasParam(name) {
			d.errorf(u.node, "${params.%s} in %s is not defined by every when path of this route: %q (line %d) has no {%s}", name, u.field, c.Path.Raw, d.pos(rc.pathNodes[i]).Line, name)
			return
		}
	}
}

// article prefixes a binding type with "a" or "an" as it is read aloud.
func article(typ string) string {
	if strings.HasPrefix(typ, "http") {
		return "an " + typ
	}
	return "a " + typ
}
