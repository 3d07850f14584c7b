package zillaimport

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
)

// Zilla's default Kafka header names. An imported binding keeps them, so the
// services answering on Kafka need no change; ours default to gateway:*.
const zillaPrefix = "zilla:"

var (
	guardedAttrRe = regexp.MustCompile(`\$\{guarded\['[^']*'\]\.attributes\.[^}]*\}`)
	headerRefRe   = regexp.MustCompile(`\$\{headers\.[^}]*\}`)
	templateRefRe = regexp.MustCompile(`\$\{(params\.[^}]*|guarded\[[^}]*|idempotencyKey|correlationId)\}`)
)

// proxyCommon checks the binding-level fields both proxies share.
func (im *importer) proxyCommon(name string, b *node) {
	im.used[name] = true
	for _, f := range []string{"entry", "catalog", "vault"} {
		if v := b.get(f); v != nil {
			im.errorf(v, "binding %s: %s has no meaning on a %s binding (Zilla's own schema forbids it)", name, f, b.get("type").str())
		}
	}
	im.known(b, "binding "+name, "type", "kind", "options", "routes", "exit", "telemetry", "entry", "catalog", "vault")
	if e := b.get("exit"); e != nil {
		im.errorf(e, "binding %s: a binding-level exit has no `with` saying what to do in Kafka; give every route its own exit and with", name)
	}
	if b.get("telemetry") != nil {
		im.note(b.get("telemetry"), "binding %s telemetry dropped: every binding's exchanges are counted in /metrics by binding and route", name)
	}
}

// template translates a templated value: ${{env.X}}, and refuses Zilla's
// guard attributes, which have no counterpart here.
func (im *importer) template(n *node, what string) string {
	s := im.scalarOf(n, what)
	if m := guardedAttrRe.FindString(s); m != "" {
		im.errorf(n, "%s: %s cannot be translated: guards here expose only ${guarded['g'].identity}", what, m)
	}
	if m := headerRefRe.FindString(s); m != "" {
		im.errorf(n, "%s: %s cannot be translated: routes here reference path parameters, the idempotency key, the correlation id and guard identities, not request headers. "+
			"A header is whatever the client sends, so records scoped by it are any client's to read and write: "+
			"take the user from a verified token (a jwt guard, ${guarded['<guard>'].identity}) or put it in the path (/users/{user}/items, ${params.user})", what, m)
	}
	return s
}

// kafkaExit follows a route's exit through Zilla's kafka cache bindings to
// the kafka client it ends at.
func (im *importer) kafkaExit(n *node) string {
	name := n.str()
	for range 4 {
		b := im.bindings[name]
		if b == nil {
			im.errorf(n, "exit %s names no binding", name)
			return ""
		}
		if b.get("type").str() != "kafka" {
			im.errorf(n, "exit %s is a %s binding: routes here must lead to a kafka client", name, b.get("type").str())
			return ""
		}
		switch b.get("kind").str() {
		case "client":
			return name
		case "cache_client", "cache_server":
			if !im.used[name] {
				im.used[name] = true
				im.note(b, "binding %s (kafka %s) dropped: fetch routes read their topics as views (the current record per key), which is what Zilla's cache gives; static topics are read from startup", name, b.get("kind").str())
			}
			if b.get("routes") != nil {
				im.errorf(b.get("routes"), "binding %s: routes of a kafka cache binding (per-topic exits) cannot be translated: each route names its kafka client here", name)
			}
			name = b.get("exit").str()
		default:
			im.errorf(n, "exit %s: kafka binding kind %s cannot be translated", name, b.get("kind").str())
			return ""
		}
	}
	im.errorf(n, "exit %s does not lead to a kafka client", n.str())
	return ""
}

func (im *importer) guarded(r *node, route *omap) {
	g := r.get("guarded")
	if g == nil {
		return
	}
	out := &omap{}
	for _, e := range g.mapEntries() {
		guard := im.root.get("guards").get(e.key)
		if guard == nil || guard.get("type").str() != "jwt" {
			im.errorf(e.val, "guarded: %s is not a jwt guard of this file", e.key)
			continue
		}
		var roles []any
		for _, role := range e.val.strs() {
			if strings.Contains(role, "${") {
				im.errorf(e.val, "guarded %s: role %q uses ${method} or ${path}, which cannot be translated: roles here are fixed names; list one route per method and path", e.key, role)
			}
			roles = append(roles, role)
		}
		if roles == nil {
			roles = []any{}
		}
		out.set(e.key, roles)
	}
	route.set("guarded", out)
}

// correlationDefaults fills the header names Zilla defaults, so the services
// written for Zilla read and write the same headers.
func correlationDefaults(headers *omap, names ...string) []string {
	var set []string
	for _, n := range names {
		if headers.get(n) == nil {
			headers.set(n, zillaPrefix+n)
			set = append(set, n)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s: Zilla's default names (ours are gateway:*), kept so the services on Kafka need no change", strings.Join(set, ", "))}
}

func (im *importer) httpKafka(name string, b *node) {
	im.proxyCommon(name, b)
	out := &omap{}
	out.set("type", "http-kafka")
	out.set("kind", "proxy")
	opts := &omap{}
	zo := b.get("options")
	im.known(zo, "binding "+name+".options", "idempotency", "correlation")
	if h := zo.get("idempotency").get("header"); h != nil {
		idem := &omap{}
		idem.set("header", im.scalarOf(h, "idempotency.header"))
		opts.set("idempotency", idem)
	}
	headers := im.stringMap(zo.get("correlation").get("headers"), "correlation.headers")
	why := correlationDefaults(headers, "reply-to", "correlation-id")
	corr := &omap{}
	corr.set("headers", headers, why...)
	opts.set("correlation", corr)
	out.set("options", opts)
	im.setProxy(b, name, "http-kafka", out, func(r *node) *omap { return im.httpRoute(name, r) })
}

func (im *importer) httpRoute(binding string, r *node) *omap {
	im.known(r, "route", "guarded", "when", "exit", "with")
	route := &omap{}
	im.guarded(r, route)
	var when []any
	for _, c := range r.get("when").list() {
		im.known(c, "when", "method", "path")
		cond := &omap{}
		if m := c.get("method"); m != nil {
			if strings.Contains(m.str(), "*") {
				im.errorf(m, "method %q: wildcards cannot be translated; leave method out to match every method", m.str())
			}
			cond.set("method", strings.ToUpper(m.str()))
		}
		if p := c.get("path"); p != nil {
			if strings.Contains(p.str(), "*") {
				im.errorf(p, "path %q: Zilla's * (any text) cannot be translated: paths here are literal parts and {name} segments", p.str())
			}
			cond.set("path", p.str())
		}
		when = append(when, cond)
	}
	if when != nil {
		route.set("when", when)
	}
	w, with, capability := im.routeWith(r, route)
	if w == nil {
		return route
	}
	switch capability {
	case "fetch":
		im.known(w, "with", "capability", "topic", "filters", "merge")
		im.topic(w, with)
		if f := w.get("filters"); f != nil {
			with.set("filters", im.filters(f))
		}
		if m := w.get("merge"); m != nil {
			im.known(m, "merge", "content-type", "patch")
			merge := &omap{}
			merge.set("content-type", im.scalarOf(m.get("content-type"), "merge.content-type"))
			if p := m.get("patch"); p != nil {
				im.known(p, "merge.patch", "initial", "path")
				patch := &omap{}
				patch.set("initial", im.scalarOf(p.get("initial"), "merge.patch.initial"))
				patch.set("path", im.scalarOf(p.get("path"), "merge.patch.path"))
				merge.set("patch", patch)
			}
			with.set("merge", merge)
		}
	case "produce":
		im.known(w, "with", "capability", "topic", "acks", "key", "overrides", "reply-to", "async", "correlation-id")
		im.topic(w, with)
		im.produceCommon(w, with)
		if a := w.get("async"); a != nil {
			with.set("async", im.templateMap(a, "async"))
		}
		if c := w.get("correlation-id"); c != nil {
			im.errorf(c, "with.correlation-id (%s: a per-route name for the correlation header of the request record) is not supported: request records here carry the binding's options.correlation.headers.correlation-id, the header replies are matched by too; have the service read that header, or put the name in the binding's options if every route and reply uses it", c.str())
		}
	default:
		im.errorf(w.get("capability"), "capability %q: want fetch or produce", capability)
	}
	route.set("with", with)
	return route
}

// topic copies with.topic; a templated topic gets the topic-pattern ours
// requires.
func (im *importer) topic(w *node, with *omap) {
	t := im.template(w.get("topic"), "topic")
	with.set("topic", t)
	if templateRefRe.MatchString(t) {
		pattern := templateRefRe.ReplaceAllString(t, "*")
		with.set("topic-pattern", pattern, "Zilla has no topic-pattern; a templated topic needs one here (names starting with _ are always refused). This one accepts whatever the template produces: narrow it")
	}
}

// produceCommon copies the produce fields both proxies share.
func (im *importer) produceCommon(w *node, with *omap) {
	if a := w.get("acks"); a != nil {
		with.set("acks", im.scalarOf(a, "acks"))
	}
	if k := w.get("key"); k != nil {
		with.set("key", im.template(k, "key"))
	}
	if o := w.get("overrides"); o != nil {
		with.set("overrides", im.templateMap(o, "overrides"))
	}
	if r := w.get("reply-to"); r != nil {
		with.set("reply-to", im.scalarOf(r, "reply-to"))
	}
}

func (im *importer) filters(f *node) []any {
	var out []any
	for _, it := range f.list() {
		im.known(it, "filters[]", "key", "headers")
		filter := &omap{}
		if k := it.get("key"); k != nil {
			filter.set("key", im.template(k, "filters[].key"))
		}
		if h := it.get("headers"); h != nil {
			filter.set("headers", im.templateMap(h, "filters[].headers"))
		}
		out = append(out, filter)
	}
	return out
}

func (im *importer) templateMap(n *node, what string) *omap {
	out := &omap{}
	for _, e := range n.mapEntries() {
		out.set(e.key, im.template(e.val, what+"."+e.key))
	}
	return out
}

func (im *importer) grpcKafka(name string, b *node) {
	im.proxyCommon(name, b)
	out := &omap{}
	out.set("type", "grpc-kafka")
	out.set("kind", "proxy")
	opts := &omap{}
	zo := b.get("options")
	im.known(zo, "binding "+name+".options", "idempotency", "correlation", "reliability")
	if m := zo.get("idempotency").get("metadata"); m != nil {
		idem := &omap{}
		idem.set("metadata", im.scalarOf(m, "idempotency.metadata"))
		opts.set("idempotency", idem)
	}
	if rel := zo.get("reliability"); rel != nil {
		im.known(rel, "reliability", "field", "metadata")
		r := &omap{}
		if f := rel.get("field"); f != nil {
			var n int
			if _, err := fmt.Sscan(f.str(), &n); err != nil {
				im.errorf(f, "reliability.field %q: want a number", f.str())
			}
			r.set("field", n)
		}
		if m := rel.get("metadata"); m != nil {
			r.set("metadata", im.scalarOf(m, "reliability.metadata"))
		}
		opts.set("reliability", r)
	}
	opts.set("correlation", im.grpcCorrelation(zo))
	out.set("options", opts)
	im.setProxy(b, name, "grpc-kafka", out, im.grpcRoute)
}

// grpcCorrelation translates the correlation headers of a grpc-kafka or
// kafka-grpc binding's options zo: both sides of a call must name the same
// headers, and Zilla's defaults are the same for both.
func (im *importer) grpcCorrelation(zo *node) *omap {
	headers := im.stringMap(zo.get("correlation").get("headers"), "correlation.headers")
	why := correlationDefaults(headers, "service", "method", "correlation-id", "reply-to")
	// Zilla's names of the reply headers that end a call are fixed, whatever
	// the correlation-id header is called.
	for _, n := range []string{"status", "message"} {
		headers.set(n, zillaPrefix+n)
	}
	corr := &omap{}
	corr.set("headers", headers, append(why, "status, message: the headers of the reply that ends a call, fixed in Zilla")...)
	return corr
}

func (im *importer) grpcRoute(r *node) *omap {
	im.known(r, "route", "guarded", "when", "exit", "with")
	route := &omap{}
	im.guarded(r, route)
	var when []any
	for _, c := range r.get("when").list() {
		im.known(c, "when", "method", "metadata")
		cond := &omap{}
		if m := c.get("method"); m != nil {
			cond.set("method", m.str())
		}
		if md := c.get("metadata"); md != nil {
			cond.set("metadata", im.metadata(md))
		}
		when = append(when, cond)
	}
	if when != nil {
		route.set("when", when)
	}
	w, with, capability := im.routeWith(r, route)
	if w == nil {
		return route
	}
	switch capability {
	case "fetch":
		im.known(w, "with", "capability", "topic", "filters")
		im.topic(w, with)
		if f := w.get("filters"); f != nil {
			with.set("filters", im.filters(f))
		}
	case "produce":
		im.known(w, "with", "capability", "topic", "acks", "key", "overrides", "reply-to")
		im.topic(w, with)
		im.produceCommon(w, with)
	default:
		im.errorf(w.get("capability"), "capability %q: want fetch or produce", capability)
	}
	route.set("with", with)
	return route
}

// routeWith sets the route's exit and starts its with (the capability);
// w is nil, and the route refused, when Zilla's route has no with.
func (im *importer) routeWith(r *node, route *omap) (w *node, with *omap, capability string) {
	route.set("exit", im.kafkaExit(r.get("exit")))
	w = r.get("with")
	if w == nil {
		im.errorf(r, "a route without with cannot be translated: with says which topic and capability")
		return nil, nil, ""
	}
	with = &omap{}
	capability = w.get("capability").str()
	with.set("capability", capability)
	return w, with, capability
}

// metadata translates Zilla's metadata conditions. Zilla names a binary
// entry without its -bin suffix and gives {base64: ...} (URL-safe); ours
// names the -bin entry and compares the decoded bytes.
func (im *importer) metadata(md *node) *omap {
	out := &omap{}
	for _, e := range md.mapEntries() {
		switch e.val.kind {
		case scalarNode:
			out.set(e.key, im.scalarOf(e.val, "metadata."+e.key), fmt.Sprintf("Zilla also matched a binary %s-bin entry with these bytes, and matched when the entry was absent; here it must be present and equal", e.key))
		case mapNode:
			im.known(e.val, "metadata."+e.key, "base64")
			raw := e.val.get("base64").str()
			b, err := base64.URLEncoding.DecodeString(raw)
			if err != nil {
				b, err = base64.StdEncoding.DecodeString(raw)
			}
			if err != nil {
				im.errorf(e.val, "metadata %s: %q is not base64", e.key, raw)
				continue
			}
			v := &omap{}
			v.set("base64", base64.StdEncoding.EncodeToString(b))
			n := strings.TrimSuffix(e.key, "-bin") + "-bin"
			out.set(n, v, fmt.Sprintf("Zilla's %s: {base64} is the binary entry %s; compared by its decoded bytes, and it must be present", e.key, n))
		default:
			im.errorf(e.val, "metadata %s: want a string or {base64: ...}", e.key)
		}
	}
	return out
}

// setProxy translates a proxy binding's routes with route, refuses a
// binding without any, and adds the binding (kind names it in the output's
// comment).
func (im *importer) setProxy(b *node, name, kind string, out *omap, route func(*node) *omap) {
	var routes []any
	for _, r := range b.get("routes").list() {
		routes = append(routes, route(r))
	}
	if len(routes) == 0 {
		im.errorf(b, "binding %s has no routes", name)
	}
	out.set("routes", routes)
	im.procs.set(name, out, fmt.Sprintf("zilla.yaml line %d: %s %s", b.pos.Line, kind, name))
}
