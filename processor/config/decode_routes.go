package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

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
	where := article(string(b.Type)) + " route"
	node, entries, ok := d.mapping(n, fmt.Sprintf("routes[%d]", idx), "key")
	if !ok {
		return nil
	}
	sec := d.shape.httpRoute
	switch b.Type {
	case GRPCKafka:
		sec = d.shape.grpcRoute
	case SSEKafka:
		sec = d.shape.sseRoute
	}
	m := d.fields(entries, where, sec.names()...)
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
				if b.Type.MatchesPaths() {
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
	switch e := m["with"]; {
	case e != nil && b.Type == SSEKafka:
		r.With = d.sseWith(e.v, rc)
	case e != nil:
		r.With = d.with(e.v, rc)
	case b.Type == SSEKafka:
		d.errorf(node, "missing required field \"with\": give the route's topic")
	default:
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

// use parses a template of a route and remembers it for the route's checks.
func (d *decoder) use(n ast.Node, field string, allow refSet, rc *routeCtx) (Template, bool) {
	t, ok := d.template(n, field, allow)
	if ok {
		rc.uses = append(rc.uses, templateUse{node: n, field: field, t: t})
	}
	return t, ok
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
	if r.With == nil {
		return // a missing or broken with is reported already; these checks need it
	}
	d.checkConditions(rc, r.With)
}

// checkConditions checks each when condition against the route's with:
// the methods a capability answers, and where {correlationId} may stand.
func (d *decoder) checkConditions(rc *routeCtx, w *With) {
	r := rc.r
	followUp := w.Capability == Produce && rc.hasReplyTo && rc.hasAsync
	for i, c := range r.When {
		if c.Path != nil && c.Path.HasParam("correlationId") && (!followUp || c.Method != "GET") {
			d.errorf(rc.pathNodes[i], "{correlationId} may only appear in a GET condition of a produce route with reply-to and async (the follow-up of an async request)")
		}
		switch {
		case rc.b.Type == SSEKafka && c.Method != "" && c.Method != "GET":
			d.errorf(rc.methNodes[i], "an sse-kafka route answers GET (an EventSource's request): method %s cannot open an event stream", c.Method)
		case w.Capability == Fetch && c.Method != "" && c.Method != "GET" && c.Method != "HEAD":
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
