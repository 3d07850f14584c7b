package config

import (
	"fmt"
	"path"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

func (d *decoder) with(n ast.Node, rc *routeCtx) *With {
	node, entries, ok := d.mapping(n, "with", "key")
	if !ok {
		return nil
	}
	http := rc.b.Type == HTTPKafka
	capStr, ok := d.discriminator(node, entries, "capability", "capability", "with", d.shape.with(http).values()...)
	if !ok {
		// Still report fields neither capability has (typos such as "capabilty").
		where := "the with of a grpc-kafka route"
		if http {
			where = "the with of an http-kafka route"
		}
		d.fields(entries, where, d.shape.withNames(http)...)
		return nil
	}
	w := &With{Capability: Capability(capStr), Pos: d.pos(node)}
	where := "the with of a grpc-kafka " + capStr + " route"
	if http {
		where = "the with of an http-kafka " + capStr + " route"
	}
	m := d.fields(entries, where, d.shape.with(http).variant(capStr).names()...)

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

// sseWith decodes the with of an sse-kafka route: a fetch, without a
// capability field, whose event id is the stream's position.
func (d *decoder) sseWith(n ast.Node, rc *routeCtx) *With {
	node, entries, ok := d.mapping(n, "with", "key")
	if !ok {
		return nil
	}
	w := &With{Capability: Fetch, EventID: EventIDPosition, Pos: d.pos(node)}
	m := d.fields(entries, "the with of an sse-kafka route", d.shape.sseWith.names()...)
	refs := allowGuardIdentity | allowParams
	d.withTopic(node, m, w, refs, rc)
	if e := m["filters"]; e != nil {
		w.Filters = d.filters(e.v, refs, rc)
	}
	if e := m["event"]; e != nil {
		em := d.object(e.v, "event", "event", d.shape.sseEvent.names()...)
		if id := em["id"]; id != nil {
			if s, ok := d.literal(id.v, "event.id"); ok && s != EventIDPosition {
				d.errorf(id.v, "event.id %q is not supported: the event id is %s, the stream's position across every partition, "+
					"which a reconnect's last-event-id resumes from; remove event.id", s, EventIDPosition)
			}
		}
	}
	return w
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
		m := d.fields(entries, "a filter", d.shape.filter(rc.b.Type.MatchesPaths()).names()...)
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
	m := d.object(n, "merge", "merge", d.shape.merge.names()...)
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
			pm := d.fields(entries, "merge.patch", d.shape.mergePatch.names()...)
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
