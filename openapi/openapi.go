// Package openapi describes the HTTP routes of a kafka-ext-proc configuration
// as an OpenAPI 3.1 document: one path per `when` path template, the methods
// each condition accepts, path and header parameters, each capability's
// responses, and guards as bearer-JWT security schemes whose roles are the
// required scopes.
//
// What OpenAPI cannot express is said in the document instead of guessed:
//
//   - A condition without a path matches every path; it is listed in
//     info.description, not under paths.
//   - A condition's methods are the router's (config.MethodsOf): a
//     path-only produce condition writes for GET, POST, PUT, PATCH and
//     DELETE; a path-only fetch condition answers GET and HEAD.
//   - Routes are tried in order, so a method on a path belongs to the first
//     route that claims it; later claims are left out (noted when the
//     condition names the method). Templates that differ only in parameter
//     names are one path to OpenAPI and are merged under the first spelling.
//   - The status of a correlated reply is the reply record's `:status`; the
//     document lists it as 200.
package openapi

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// Version is the OpenAPI version of the generated documents.
const Version = "3.1.0"

// Options tune the generated document.
type Options struct {
	// Binding names the http-kafka or sse-kafka binding to describe; empty means the
	// configuration's only one. With several, Envoy routes pick the binding
	// per request, so their paths may overlap: the document covers one.
	Binding string
	Title   string   // info.title; default "kafka-ext-proc: <binding>"
	Version string   // info.version; default "1.0.0"
	Servers []string // server URLs, e.g. the Envoy listener's
}

// Generate describes one http-kafka or sse-kafka binding of cfg.
func Generate(cfg *config.Config, opts Options) (*Document, error) {
	if cfg == nil {
		return nil, errors.New("openapi: no configuration")
	}
	b, err := pickBinding(cfg, opts.Binding)
	if err != nil {
		return nil, err
	}
	if opts.Title == "" {
		opts.Title = "kafka-ext-proc: " + b.Name
	}
	if opts.Version == "" {
		opts.Version = "1.0.0"
	}
	g := &generator{
		cfg:    cfg,
		b:      b,
		paths:  map[string]*PathItem{},
		shapes: map[string]string{},
		owner:  map[string]string{},
		comp:   newComponents(cfg, b),
	}
	for _, r := range b.Routes {
		g.route(r)
	}
	doc := &Document{
		OpenAPI:    Version,
		Info:       Info{Title: opts.Title, Version: opts.Version, Description: g.description()},
		Tags:       []Tag{{Name: b.Name, Description: "Routes of the " + string(b.Type) + " binding " + b.Name + "."}},
		Paths:      g.paths,
		Components: g.comp.build(),
	}
	for _, s := range opts.Servers {
		doc.Servers = append(doc.Servers, Server{URL: s})
	}
	return doc, nil
}

func pickBinding(cfg *config.Config, name string) (*config.Binding, error) {
	var names []string
	for _, b := range cfg.Bindings {
		if !b.Type.MatchesPaths() {
			continue
		}
		if b.Name == name {
			return b, nil
		}
		names = append(names, b.Name)
	}
	switch {
	case name != "":
		return nil, fmt.Errorf("openapi: no http-kafka or sse-kafka binding %q (have: %s)", name, listOrNone(names))
	case len(names) == 0:
		return nil, errors.New("openapi: the configuration has no http-kafka or sse-kafka binding")
	case len(names) > 1:
		return nil, fmt.Errorf("openapi: the configuration has several http-kafka or sse-kafka bindings (%s): choose one", strings.Join(names, ", "))
	}
	for _, b := range cfg.Bindings {
		if b.Name == names[0] {
			return b, nil
		}
	}
	return nil, errors.New("openapi: unreachable")
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

type generator struct {
	cfg   *config.Config
	b     *config.Binding
	paths map[string]*PathItem
	// shapes maps a template with its parameter names erased to the first
	// spelling seen: OpenAPI treats such templates as one path.
	shapes map[string]string
	// owner maps "METHOD path" to the operation that claimed it first.
	owner map[string]string
	notes []string
	comp  *components
}

func (g *generator) note(format string, args ...any) {
	g.notes = append(g.notes, fmt.Sprintf(format, args...))
}

func (g *generator) routeName(r *config.Route) string {
	return fmt.Sprintf("%s route %d", g.b.Name, r.Index)
}

func (g *generator) route(r *config.Route) {
	if r.With == nil {
		return // the loader refuses an http route without `with`
	}
	if len(r.When) == 0 {
		g.note("%s (%s %s) has no `when`: it matches %s on every path.", g.routeName(r), r.With.Capability, r.With.Topic.Raw,
			strings.Join(config.MethodsOf("", r.With.Capability), ", "))
		return
	}
	for i, c := range r.When {
		if c.Path == nil {
			g.note("%s (%s %s) matches %s on every path.", g.routeName(r), r.With.Capability, r.With.Topic.Raw,
				strings.Join(c.Methods(r.With.Capability), ", "))
			continue
		}
		for _, m := range c.Methods(r.With.Capability) { // the router's rule
			g.operation(r, i, c, m)
		}
	}
}

// pathKey is the OpenAPI path for a template: the template itself (the
// `{name}` syntax is the same), or the first spelling of the same shape.
func (g *generator) pathKey(t *config.PathTemplate) string {
	var shape strings.Builder
	for _, p := range t.Parts {
		if p.Param != "" {
			shape.WriteString("{}")
		} else {
			shape.WriteString(p.Literal)
		}
	}
	if key, ok := g.shapes[shape.String()]; ok {
		return key
	}
	g.shapes[shape.String()] = t.Raw
	item := &PathItem{}
	for _, name := range t.Params {
		item.Parameters = append(item.Parameters, pathParameter(name))
	}
	g.paths[t.Raw] = item
	return t.Raw
}

func pathParameter(name string) *Parameter {
	p := &Parameter{
		Name: name, In: "path", Required: true,
		Description: "One path segment, percent-encoded: it does not contain '/', ';' or '?' as sent.",
		Schema:      &Schema{Type: "string", MinLength: 1},
	}
	if name == "correlationId" {
		p.Description = "The correlation id from the `location` of a 202 Accepted answer."
	}
	return p
}

func (g *generator) operation(r *config.Route, cond int, c config.Condition, method string) {
	key := g.pathKey(c.Path)
	slot := g.paths[key].slot(method)
	id := fmt.Sprintf("%s_route%d_when%d_%s", g.b.Name, r.Index, cond, strings.ToLower(method))
	if slot == nil {
		return // CONNECT: refused by the loader
	}
	if prev := g.owner[method+" "+key]; prev != "" {
		if c.Method != "" {
			g.note("%s: %s %s is answered by %s first, so this condition is never reached for it.", g.routeName(r), method, c.Path.Raw, prev)
		}
		return
	}
	g.owner[method+" "+key] = id

	w := r.With
	op := &Operation{
		Tags:        []string{g.b.Name},
		OperationID: id,
		Route: &RouteExtension{
			Binding: g.b.Name, Route: r.Index, Capability: string(w.Capability), Topic: w.Topic.Raw,
		},
	}
	switch {
	case g.b.Type == config.SSEKafka:
		g.events(op, w, method)
	case w.Capability == config.Fetch:
		g.fetch(op, w, method)
	case c.Path.HasParam("correlationId"):
		g.followUp(op, w)
	default:
		g.produce(op, w, method, c.Method == "")
	}
	if g.b.Type != config.SSEKafka {
		g.models(op, r, method)
	}
	if !w.Topic.Static() {
		op.Responses["400"] = problem("The resolved topic name is not allowed: it does not match the route's topic-pattern `" + w.TopicPattern + "`, or it starts with '_'.")
		if _, ok := op.Responses["404"]; !ok {
			op.Responses["404"] = problem("The resolved topic does not exist: requests never create topics.")
		}
	}
	if len(r.Guarded) > 0 {
		req := map[string][]string{}
		for _, gr := range r.Guarded {
			req[gr.Guard] = append([]string{}, gr.Roles...) // never null: the roles list is required
			g.comp.guards[gr.Guard] = true
		}
		op.Security = []map[string][]string{req}
		op.Responses["401"] = g.comp.response("Unauthorized")
		op.Responses["403"] = g.comp.response("Forbidden")
	}
	*slot = op
}

func (g *generator) fetch(op *Operation, w *config.With, method string) {
	op.Parameters = []*Parameter{g.comp.parameter("IfNoneMatch"), g.comp.parameter("PreferWait")}
	ok := &Response{Headers: map[string]*Header{
		"etag":               g.comp.header("ETag"),
		"preference-applied": g.comp.header("PreferenceApplied"),
	}}
	op.Responses = map[string]*Response{
		"200": ok,
		"304": g.comp.response("NotModified"),
		"503": g.comp.response("ServiceUnavailable"),
	}
	if w.Merge != nil {
		op.Summary = "All current records of " + w.Topic.Raw + ", merged"
		op.Description = fmt.Sprintf("A JSON array of the current value of every key of topic `%s`%s, in (partition, offset) order; "+
			"null, empty and non-JSON values are left out. %s", w.Topic.Raw, filtersText(w.Filters, " matching "), longPollText(g.cfg.Limits))
		ok.Description = "The merged records."
		if method != "HEAD" {
			ok.Content = map[string]*MediaType{"application/json": {Schema: &Schema{Type: "array", Items: &Schema{}}}}
		}
	} else {
		op.Summary = "The current record of " + w.Topic.Raw + filtersText(w.Filters, " with ")
		op.Description = fmt.Sprintf("The current record of topic `%s`%s (the latest by timestamp, then partition, then offset, "+
			"if several match). %s", w.Topic.Raw, filtersText(w.Filters, " matching "), longPollText(g.cfg.Limits))
		ok.Description = "The record's value, with the record's `content-type`."
		if method != "HEAD" {
			ok.Content = map[string]*MediaType{"*/*": {Schema: &Schema{}}}
		}
		op.Responses["204"] = &Response{
			Description: "The matching record's value is empty.",
			Headers:     map[string]*Header{"etag": g.comp.header("ETag")},
		}
		op.Responses["404"] = problem("No current record matches (with `prefer: wait=N`, none appeared within N seconds).")
	}
	if method == "HEAD" {
		op.Summary = "Headers of: " + op.Summary
	}
}

// events describes an sse-kafka route: a Server-Sent Events stream.
func (g *generator) events(op *Operation, w *config.With, method string) {
	op.Parameters = []*Parameter{
		{Name: "accept", In: "header", Required: true, Schema: &Schema{Type: "string", Examples: []any{"text/event-stream"}},
			Description: "Must name text/event-stream (EventSource does): the answer is a stream that never ends, so `*/*` or none is 406."},
		{Name: "last-event-id", In: "header", Schema: &Schema{Type: "string", MaxLength: 16 << 10},
			Description: "The id of the last event received (EventSource sends it when it reconnects): the stream continues right after it."},
	}
	ok := &Response{
		Description: fmt.Sprintf("Server-Sent Events: `retry:` first, then per record `id:` (the stream's position) and one `data:` line per line "+
			"of the value; a tombstone is `event: delete` with the key as data; a comment after %s of silence and when the stream ends.",
			fmtDuration(g.cfg.Limits.SSEHeartbeat)),
		Headers: map[string]*Header{"cache-control": {Description: "no-cache", Schema: &Schema{Type: "string"}}},
	}
	if method != "HEAD" {
		ok.Content = map[string]*MediaType{"text/event-stream": {Schema: &Schema{Type: "string"}}}
	}
	op.Summary = "Events of " + w.Topic.Raw + filtersText(w.Filters, " with ")
	op.Description = fmt.Sprintf("Every record of topic `%s`%s as it is written: a compacted topic's current records first, any other "+
		"topic's retained log, then each new record, until the client goes away or the stream ends (the processor drains, "+
		"the client falls limits.stream-lag-budget records behind, the topic gains partitions); the client reconnects with last-event-id.",
		w.Topic.Raw, filtersText(w.Filters, " matching "))
	op.Responses = map[string]*Response{
		"200": ok,
		"400": problem("last-event-id is sent more than once, is longer than 16 KiB, is not an event id of this gateway, or names a partition the topic does not have."),
		"406": problem("accept does not name text/event-stream."),
		"410": problem("The records after last-event-id were deleted by retention: reconnect without it to read what the topic still holds."),
		"503": g.comp.response("ServiceUnavailable"),
	}
	if method == "HEAD" {
		op.Summary = "Headers of: " + op.Summary
	}
}

func (g *generator) produce(op *Operation, w *config.With, method string, anyMethod bool) {
	op.Route.ReplyTo = w.ReplyTo
	op.Route.Acks = string(w.Acks)
	op.Parameters = []*Parameter{g.comp.parameter("IdempotencyKey")}
	limits := g.cfg.Limits
	op.Responses = map[string]*Response{
		"400": problem("Malformed request: an idempotency key that is not 1 to 128 characters of [A-Za-z0-9._~-], or no key resolved for a compacted topic."),
		"413": g.comp.response("ContentTooLarge"),
		"502": g.comp.response("BadGateway"),
		"503": g.comp.response("ServiceUnavailable"),
	}
	if method != "GET" && method != "HEAD" && method != "DELETE" {
		op.RequestBody = &RequestBody{
			Description: fmt.Sprintf("Written as the record's value (at most %s).", config.FormatSize(limits.MaxBody)),
			Content:     map[string]*MediaType{"*/*": {Schema: &Schema{}}},
		}
	}
	key := ""
	if w.Key != nil {
		key = ", key `" + w.Key.Raw + "`"
	}
	if w.ReplyTo == "" {
		op.Summary = "Write to " + w.Topic.Raw
		op.Description = fmt.Sprintf("Writes a record to topic `%s`%s with acks `%s`; no reply is awaited.", w.Topic.Raw, key, w.Acks)
		if w.Acks == config.AcksNone {
			op.Description += " With acks `none`, acknowledged means handed to the broker."
		}
		if method == "DELETE" {
			op.Description += " DELETE writes a tombstone (a null value)."
		}
		op.Responses["204"] = &Response{Description: "The broker acknowledged the record."}
		op.Responses["504"] = problem(fmt.Sprintf("The record was not acknowledged within limits.kafka-timeout (%s): its outcome is unknown; a retry with the same idempotency key writes it at most once, one without a key may write a second copy.", fmtDuration(limits.KafkaTimeout)))
	} else {
		op.Summary = "Request to " + w.Topic.Raw + ", reply from " + w.ReplyTo
		op.Description = fmt.Sprintf("Writes the request (body, headers, correlation id) to topic `%s`%s with acks `%s`, "+
			"then answers with the first reply on `%s` carrying the same correlation id. A replay with the same idempotency key "+
			"within limits.idempotency-window writes nothing already written and gets the reply.", w.Topic.Raw, key, w.Acks, w.ReplyTo)
		op.Responses["200"] = replyResponse()
		op.Responses["504"] = problem(fmt.Sprintf("No reply within limits.reply-timeout (%s), or the record was not acknowledged within limits.kafka-timeout (%s); "+
			"a retry with the same idempotency key writes it at most once, one without a key may write a second copy.",
			fmtDuration(limits.ReplyTimeout), fmtDuration(limits.KafkaTimeout)))
	}
	op.Responses["410"] = problem(fmt.Sprintf("The request's idempotency key was first written more than limits.idempotency-window (%s) ago: its result expired and nothing was written.",
		fmtDuration(limits.IdempotencyWindow)))
	if len(w.Async) > 0 && w.ReplyTo != "" {
		op.Parameters = append(op.Parameters, g.comp.parameter("PreferAsync"))
		op.Responses["202"] = g.accepted(w, "Accepted: with `prefer: respond-async` once the broker acknowledged the request, "+
			"or when no reply came within limits.reply-timeout, or while the processor drains. Follow `location` for the reply.")
		op.Responses["504"] = problem(fmt.Sprintf("The record was not acknowledged within limits.kafka-timeout (%s).", fmtDuration(limits.KafkaTimeout)))
	}
	if anyMethod {
		op.Description += " The route names no method: it writes for GET, POST, PUT, PATCH and DELETE on this path (OPTIONS, HEAD and TRACE are answered 405)."
	}
}

func (g *generator) followUp(op *Operation, w *config.With) {
	op.Route.FollowUp = true
	op.Route.ReplyTo = w.ReplyTo
	op.Summary = "Reply to an accepted request to " + w.Topic.Raw
	op.Description = fmt.Sprintf("The reply on `%s` to a request answered 202 Accepted. Nothing is produced.", w.ReplyTo)
	op.Parameters = []*Parameter{g.comp.parameter("PreferFollowUp")}
	op.Responses = map[string]*Response{
		"200": replyResponse(),
		"202": g.accepted(w, "No reply yet (with `prefer: wait=N`, none within N seconds): ask again at `location`."),
		"404": problem("The correlation id names another caller's request: only the caller that made it may follow it up."),
		"410": problem("No reply is stored and the request was written more than limits.idempotency-window ago (or is no longer remembered): its result expired."),
		"503": g.comp.response("ServiceUnavailable"),
	}
}

// accepted is a 202 with the route's async headers (`location` and any others).
func (g *generator) accepted(w *config.With, desc string) *Response {
	r := &Response{Description: desc, Headers: map[string]*Header{}}
	for _, h := range w.Async {
		r.Headers[h.Name] = &Header{
			Description: "`" + h.Value.Raw + "`, expanded.",
			Required:    true,
			Schema:      &Schema{Type: "string"},
		}
	}
	r.Headers["preference-applied"] = g.comp.header("PreferenceApplied")
	return r
}

func replyResponse() *Response {
	return &Response{
		Description: "The reply record: its `:status` header (200 to 599; none means 200) is the status, its other headers the response headers, its value the body.",
		Content:     map[string]*MediaType{"*/*": {Schema: &Schema{}}},
	}
}

func problem(desc string) *Response {
	return &Response{
		Description: desc,
		Content:     map[string]*MediaType{"application/problem+json": {Schema: &Schema{Ref: "#/components/schemas/Problem"}}},
	}
}

func filtersText(fs []config.Filter, lead string) string {
	if len(fs) == 0 {
		return ""
	}
	alts := make([]string, len(fs))
	for i, f := range fs {
		var parts []string
		if f.Key != nil {
			parts = append(parts, "key `"+f.Key.Raw+"`")
		}
		for _, h := range f.Headers {
			parts = append(parts, "header `"+h.Name+": "+h.Value.Raw+"`")
		}
		alts[i] = strings.Join(parts, " and ")
	}
	return lead + strings.Join(alts, " or ")
}

func longPollText(l config.Limits) string {
	return fmt.Sprintf("With `if-none-match` and `prefer: wait=N` (N at most limits.max-wait, %s) the request waits until the answer changes.", fmtDuration(l.MaxWait))
}

func fmtDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

func (g *generator) description() string {
	var b strings.Builder
	fmt.Fprintf(&b, "The HTTP routes of the http-kafka binding `%s`", g.b.Name)
	if g.cfg.Source != "" {
		fmt.Fprintf(&b, " in `%s`", filepath.Base(g.cfg.Source))
	}
	b.WriteString(", generated by `kafka-ext-proc openapi`. Errors are `application/problem+json` (RFC 9457).")
	if len(g.notes) > 0 {
		b.WriteString("\n\nNot listed under paths:\n")
		for _, n := range slices.Compact(g.notes) {
			b.WriteString("\n- " + n)
		}
	}
	return b.String()
}
