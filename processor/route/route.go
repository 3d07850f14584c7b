// Package route builds the processor's routing table from a configuration and
// matches requests against it (docs/design.md#routes-and-guards).
//
// A Table is immutable once built: the processor swaps whole tables on reload,
// and an exchange keeps the table it started with. Matching allocates only for
// a successful match (its parameters and identities).
//
// Routes of a binding are tried in order; the `when` entries of a route are
// ORed, and a route without `when` matches everything. A matching route whose
// guards fail is skipped (see GuardChecker and GuardError).
//
// HTTP conditions: a condition accepts the methods config.MethodsOf lists: the
// one it names (HEAD also matches the GET conditions of fetch routes), or,
// naming none, GET and HEAD for a fetch and GET, POST, PUT, PATCH and DELETE
// for a produce, so a CORS preflight (OPTIONS) never writes. A route without
// `when` is a condition without method or path. A request whose path some
// route matches, but not its method, fails with a *MethodError (405).
// Path templates (a parameter within one segment, the query ignored: routing
// is predictable, unlike Zilla's; docs/design.md#routes-and-guards):
//
//   - A template matches the path without its query string (SplitPath).
//   - Literal parts compare byte for byte with the path as sent, still
//     percent-encoded: `/items` does not match `/it%65ms`. Envoy's own path
//     normalisation, if envoy.yaml enables it, happens before we see the path.
//   - `{name}` matches one non-empty run of characters other than '/', ';'
//     and '?'. Where a literal that does not start with '/' or ';' follows a
//     parameter (`/files/{name}.json`), the parameter is greedy and gives back
//     what the literal needs, as a regular expression would.
//   - Parameter values are percent-decoded after matching, so a `%2F` inside a
//     segment stays inside the value (as "/"); a value with an invalid escape
//     (`100%`) is kept as sent rather than refused.
//   - A trailing slash is significant: `/items/` does not match `/items`.
//
// gRPC conditions: `method` is pkg.Service/Method or pkg.Service/* against
// the :path /pkg.Service/Method, `service` is pkg.Service, and every
// `metadata` entry must be present with an equal value. A header sent several
// times matches if any value is equal; the values of `-bin` headers are
// compared base64-decoded (padded or not, each comma-separated element),
// whether the condition gave a string or {base64: …}.
package route

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// ErrNoRoute is returned when no route of a binding matches and none was
// skipped for its guard.
var ErrNoRoute = errors.New("no route matches the request")

// Identity is what a guard established about the caller.
type Identity struct {
	Subject string   // e.g. the token's sub claim
	Roles   []string // roles (scopes) the credentials grant
}

// GuardChecker verifies a request's credentials against a named guard
// (implemented by the guard package). An error means the credentials are
// missing or invalid (401); the router itself compares the roles a route
// requires with Identity.Roles (403 when some are missing). Check is called
// at most once per guard and request, and only for routes whose conditions
// match.
type GuardChecker interface {
	Check(ctx context.Context, guard string, headers Headers, metadata map[string]*structpb.Struct) (Identity, error)
}

// GuardError is returned when no route was taken but at least one matching
// route was skipped because of its guard.
type GuardError struct {
	// Forbidden: every skipped route failed only on missing roles (403);
	// otherwise credentials were missing or invalid (401).
	Forbidden bool
	Guard     string   // the guard of the first such failure
	Missing   []string // Forbidden: the roles that were missing
	Err       error    // !Forbidden: the guard's error
}

func (e *GuardError) Error() string {
	if e.Forbidden {
		return fmt.Sprintf("guard %q: missing role(s) %s", e.Guard, strings.Join(e.Missing, ", "))
	}
	return fmt.Sprintf("guard %q: %v", e.Guard, e.Err)
}

func (e *GuardError) Unwrap() error { return e.Err }

// MethodError is returned when no route was taken, none was skipped for its
// guard, and some route's condition matches the path but not the method: the
// answer is 405 with Allow. It is an ErrNoRoute too.
type MethodError struct {
	Method string
	Allow  []string // the methods the path's conditions accept, in httpMethodOrder
}

func (e *MethodError) Error() string {
	return fmt.Sprintf("method %s is not accepted here; allowed: %s", e.Method, strings.Join(e.Allow, ", "))
}

// Is makes a MethodError an ErrNoRoute: no route matches the request.
func (e *MethodError) Is(target error) bool { return target == ErrNoRoute }

// httpMethodOrder is the order of Allow.
var httpMethodOrder = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"}

// Match is a route taken for a request.
type Match struct {
	Binding *config.Binding
	Route   *config.Route
	// Condition is the index of the `when` entry that matched, -1 for a route
	// without `when`.
	Condition int
	// Params are the path parameters of the matched condition, percent-decoded
	// (nil when it has none).
	Params map[string]string
	// Identities maps each guard of a guarded route to what it established
	// (nil for an unguarded route).
	Identities map[string]Identity
	// Ordinal is the route's position among all the table's routes, from 0
	// to Table.Routes()-1, so that a caller can keep per-route state in a
	// slice built with the table and reach it without a look-up by name.
	Ordinal int
}

// HTTPRequest is what HTTP matching reads of a request.
type HTTPRequest struct {
	Method  string // :method
	Path    string // :path without the query string (see SplitPath)
	Headers Headers
	// Metadata is the ext_proc metadata_context's filter metadata by namespace
	// (e.g. envoy.filters.http.jwt_authn), for guards that trust Envoy.
	Metadata map[string]*structpb.Struct
}

// GRPCRequest is what gRPC matching reads of a request.
type GRPCRequest struct {
	Service string // "pkg.Service" of :path /pkg.Service/Method
	Method  string // "Method"
	Headers Headers
	// Metadata: as HTTPRequest.Metadata.
	Metadata map[string]*structpb.Struct
}

// ParseGRPCPath splits a gRPC :path "/pkg.Service/Method".
func ParseGRPCPath(p string) (service, method string, ok bool) {
	if len(p) < 4 || p[0] != '/' {
		return "", "", false
	}
	i := strings.LastIndexByte(p, '/')
	if i <= 1 || i == len(p)-1 {
		return "", "", false
	}
	return p[1:i], p[i+1:], true
}

// Table is an immutable routing table: every http-kafka and grpc-kafka binding
// of one configuration, compiled.
type Table struct {
	cfg      *config.Config
	bindings []*Binding
	byName   map[string]*Binding
	// byType is bindings by type, built once: every exchange without a
	// binding named in its metadata asks for it.
	byType map[config.BindingType][]*Binding
	routes int // over every binding; see Match.Ordinal
}

// Binding is one compiled proxy binding.
type Binding struct {
	Config *config.Binding
	routes []*compiledRoute
	index  *segmentIndex // the routes by the first path segment they need
}

type compiledRoute struct {
	cfg        *config.Route
	ordinal    int               // Match.Ordinal
	capability config.Capability // which methods a condition accepts (config.MethodsOf)
	conds      []condition
}

type condition struct {
	method string       // HTTP; "" = any
	path   *pathMatcher // HTTP; nil = any

	service    string // gRPC; "" = any
	grpcMethod string // gRPC method name; "" or "*" = any
	metadata   []config.MetadataMatch
}

// Build compiles a configuration. It fails only on what the loader should
// have refused (an unknown binding type, a malformed gRPC method pattern).
func Build(cfg *config.Config) (*Table, error) {
	if cfg == nil {
		return nil, errors.New("building routes: no configuration")
	}
	t := &Table{cfg: cfg, byName: make(map[string]*Binding, len(cfg.Bindings))}
	for _, b := range cfg.Bindings {
		if b.Type != config.HTTPKafka && b.Type != config.GRPCKafka && b.Type != config.SSEKafka {
			return nil, fmt.Errorf("building routes of binding %q: unknown type %q", b.Name, b.Type)
		}
		if _, dup := t.byName[b.Name]; dup {
			return nil, fmt.Errorf("building routes: duplicate binding %q", b.Name)
		}
		cb := &Binding{Config: b}
		for _, r := range b.Routes {
			cr, err := compileRoute(b.Type, r)
			if err != nil {
				return nil, fmt.Errorf("building routes of binding %q, route %d: %w", b.Name, r.Index, err)
			}
			cr.ordinal = t.routes
			t.routes++
			cb.routes = append(cb.routes, cr)
		}
		cb.index = newSegmentIndex(cb.routes)
		t.bindings = append(t.bindings, cb)
		t.byName[b.Name] = cb
	}
	t.byType = make(map[config.BindingType][]*Binding, 2)
	for _, b := range t.bindings {
		t.byType[b.Config.Type] = append(t.byType[b.Config.Type], b)
	}
	return t, nil
}

func compileRoute(typ config.BindingType, r *config.Route) (*compiledRoute, error) {
	cr := &compiledRoute{cfg: r}
	if r.With != nil {
		cr.capability = r.With.Capability
	}
	for i := range r.When {
		w := &r.When[i]
		c := condition{method: w.Method, service: w.Service, metadata: w.Metadata}
		if typ.MatchesPaths() {
			pm, err := compilePath(w.Path)
			if err != nil {
				return nil, err
			}
			c.path = pm
		}
		if w.GRPCMethod != "" {
			svc, m, ok := strings.Cut(w.GRPCMethod, "/")
			if !ok || svc == "" || m == "" || strings.Contains(m, "/") {
				return nil, fmt.Errorf("gRPC method %q is not shaped pkg.Service/Method or pkg.Service/*", w.GRPCMethod)
			}
			if c.service != "" && c.service != svc {
				// Both given and contradictory: a condition that never matches.
				c.grpcMethod = "\x00never"
			} else {
				c.service, c.grpcMethod = svc, m
			}
		}
		cr.conds = append(cr.conds, c)
	}
	return cr, nil
}

// EachRoute calls f with each route of the binding, in order, and its
// Match.Ordinal.
func (b *Binding) EachRoute(f func(ordinal int, r *config.Route)) {
	for _, r := range b.routes {
		f(r.ordinal, r.cfg)
	}
}

// Config is the configuration the table was built from.
func (t *Table) Config() *config.Config { return t.cfg }

// Routes is the number of routes over every binding of the table: each
// Match.Ordinal is below it.
func (t *Table) Routes() int { return t.routes }

// Binding returns the binding of that name, or nil.
func (t *Table) Binding(name string) *Binding { return t.byName[name] }

// OfType returns the bindings of one type in file order. The slice is the
// table's own: callers must not modify it.
func (t *Table) OfType(typ config.BindingType) []*Binding { return t.byType[typ] }

// MatchHTTP takes the first route, in order, whose `when` matches the request
// and whose guards pass. It returns ErrNoRoute, or a *GuardError when a
// matching route was skipped for its guard.
func (b *Binding) MatchHTTP(ctx context.Context, req *HTTPRequest, guards GuardChecker) (*Match, error) {
	var spanBuf [16]int // parameter offsets without allocating, for up to 8 parameters
	gs := guardState{checker: guards, headers: req.Headers, metadata: req.Metadata}
	var m *Match
	try := func(i int) bool {
		r := b.routes[i]
		ci, pm, spans, ok := r.matchHTTP(req, spanBuf[:0])
		if !ok {
			return false
		}
		ids, ok := gs.pass(ctx, r.cfg)
		if !ok {
			return false
		}
		m = &Match{Binding: b.Config, Route: r.cfg, Condition: ci, Identities: ids, Ordinal: r.ordinal}
		if pm != nil {
			m.Params = pm.params(req.Path, spans)
		}
		return true
	}
	b.index.candidates(req.Path, try)
	if m != nil {
		return m, nil
	}
	err := gs.failure()
	if err == ErrNoRoute {
		if allow := b.allowed(req, spanBuf[:0]); len(allow) > 0 {
			return nil, &MethodError{Method: req.Method, Allow: allow}
		}
	}
	return nil, err
}

// MatchesPath reports whether a condition of the binding's routes matches
// path, whatever the method and guards: what picks an sse-kafka binding over
// an http-kafka one for an HTTP request (see processor's chooseBinding).
func (b *Binding) MatchesPath(path string) bool {
	var spans [16]int
	found := false
	b.index.candidates(path, func(i int) bool {
		for _, c := range b.routes[i].conds {
			if c.path == nil {
				found = true
				return true
			}
			if _, ok := c.path.match(path, spans[:0]); ok {
				found = true
				return true
			}
		}
		if len(b.routes[i].conds) == 0 {
			found = true
		}
		return found
	})
	return found
}

// allowed lists the methods of the conditions whose path matches the
// request's, whatever its method: the 405 answer's Allow.
func (b *Binding) allowed(req *HTTPRequest, spans []int) []string {
	var set [8]bool // by httpMethodOrder
	found := false
	b.index.candidates(req.Path, func(i int) bool {
		r := b.routes[i]
		conds := r.conds
		if len(conds) == 0 {
			conds = []condition{{}}
		}
		for i := range conds {
			c := &conds[i]
			if c.path != nil {
				if _, ok := c.path.match(req.Path, spans[:0]); !ok {
					continue
				}
			}
			for _, m := range config.MethodsOf(c.method, r.capability) {
				if j := slices.Index(httpMethodOrder, m); j >= 0 {
					set[j], found = true, true
				}
			}
		}
		return false
	})
	if !found {
		return nil
	}
	var allow []string
	for j, ok := range set {
		if ok {
			allow = append(allow, httpMethodOrder[j])
		}
	}
	return allow
}

func (r *compiledRoute) matchHTTP(req *HTTPRequest, spans []int) (int, *pathMatcher, []int, bool) {
	if len(r.conds) == 0 {
		return -1, nil, spans, r.accepts("", req.Method)
	}
	for i := range r.conds {
		c := &r.conds[i]
		if !r.accepts(c.method, req.Method) {
			continue
		}
		if c.path == nil {
			return i, nil, spans, true
		}
		if s, ok := c.path.match(req.Path, spans[:0]); ok {
			return i, c.path, s, true
		}
	}
	return 0, nil, spans, false
}

// accepts: whether a condition naming method (or none) accepts the request's.
// A route without a capability (only in tests of this package: the loader
// refuses an http route without `with`) accepts any method.
func (r *compiledRoute) accepts(method, reqMethod string) bool {
	if r.capability == "" {
		return method == "" || method == reqMethod
	}
	return config.AcceptsMethod(method, r.capability, reqMethod)
}

// MatchGRPC is MatchHTTP for gRPC requests.
func (b *Binding) MatchGRPC(ctx context.Context, req *GRPCRequest, guards GuardChecker) (*Match, error) {
	gs := guardState{checker: guards, headers: req.Headers, metadata: req.Metadata}
	for _, r := range b.routes {
		ci, ok := r.matchGRPC(req)
		if !ok {
			continue
		}
		ids, ok := gs.pass(ctx, r.cfg)
		if !ok {
			continue
		}
		return &Match{Binding: b.Config, Route: r.cfg, Condition: ci, Identities: ids, Ordinal: r.ordinal}, nil
	}
	return nil, gs.failure()
}

func (r *compiledRoute) matchGRPC(req *GRPCRequest) (int, bool) {
	if len(r.conds) == 0 {
		return -1, true
	}
	for i := range r.conds {
		c := &r.conds[i]
		if c.service != "" && c.service != req.Service {
			continue
		}
		if c.grpcMethod != "" && c.grpcMethod != "*" && c.grpcMethod != req.Method {
			continue
		}
		if !metadataMatches(c.metadata, req.Headers) {
			continue
		}
		return i, true
	}
	return 0, false
}

// metadataMatches: every entry must be present with an equal value. A request
// header sent several times matches if any of its values is equal. Values of
// `-bin` headers are compared base64-decoded (each comma-separated element,
// padded or not), whether the condition gave a string or {base64: …}.
func metadataMatches(want []config.MetadataMatch, h Headers) bool {
	for _, mm := range want {
		bin := strings.HasSuffix(mm.Name, "-bin")
		found := false
		for i := 0; i < len(h) && !found; i++ {
			if h[i].Name != mm.Name {
				continue
			}
			if !bin {
				found = h[i].Value == string(mm.Value)
				continue
			}
			for _, part := range strings.Split(h[i].Value, ",") {
				if v, ok := decodeBin(strings.TrimSpace(part)); ok && string(v) == string(mm.Value) {
					found = true
					break
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func decodeBin(s string) ([]byte, bool) {
	if v, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "=")); err == nil {
		return v, true
	}
	return nil, false
}

// guardState checks each guard at most once per request and remembers why
// routes were skipped.
type guardState struct {
	checker  GuardChecker
	headers  Headers
	metadata map[string]*structpb.Struct

	results []guardResult

	unauthenticated *GuardError // first route skipped for missing/invalid credentials
	forbidden       *GuardError // first route skipped for missing roles
}

type guardResult struct {
	guard string
	id    Identity
	err   error
}

var errNoChecker = errors.New("no guard checker is configured, so guarded routes are closed")

func (g *guardState) check(ctx context.Context, guard string) (Identity, error) {
	for _, r := range g.results {
		if r.guard == guard {
			return r.id, r.err
		}
	}
	var id Identity
	err := errNoChecker
	if g.checker != nil {
		id, err = g.checker.Check(ctx, guard, g.headers, g.metadata)
	}
	g.results = append(g.results, guardResult{guard: guard, id: id, err: err})
	return id, err
}

// pass checks every guard of a route (all must pass) and every role each
// requires.
func (g *guardState) pass(ctx context.Context, r *config.Route) (map[string]Identity, bool) {
	if len(r.Guarded) == 0 {
		return nil, true
	}
	ids := make(map[string]Identity, len(r.Guarded))
	for _, req := range r.Guarded {
		id, err := g.check(ctx, req.Guard)
		if err != nil {
			if g.unauthenticated == nil {
				g.unauthenticated = &GuardError{Guard: req.Guard, Err: err}
			}
			return nil, false
		}
		var missing []string
		for _, role := range req.Roles {
			if !slices.Contains(id.Roles, role) {
				missing = append(missing, role)
			}
		}
		if len(missing) > 0 {
			if g.forbidden == nil {
				g.forbidden = &GuardError{Forbidden: true, Guard: req.Guard, Missing: missing}
			}
			return nil, false
		}
		ids[req.Guard] = id
	}
	return ids, true
}

// failure is the error when no route was taken.
func (g *guardState) failure() error {
	switch {
	case g.unauthenticated != nil:
		return g.unauthenticated
	case g.forbidden != nil:
		return g.forbidden
	default:
		return ErrNoRoute
	}
}
