package models

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/sync/singleflight"
)

// RegistryOptions configure a Confluent-compatible Schema Registry catalog
// (Confluent, Karapace, Redpanda; Apicurio at its ccompat API).
type RegistryOptions struct {
	URLs []string // tried in order on transport errors
	// Username and Password select basic auth; Token selects bearer auth.
	Username, Password string
	Token              string
	TLS                *tls.Config // nil: the system roots
	// Context is the registry's schema context (Confluent contexts, Zilla's
	// `context`); empty: the default context.
	Context string
	// MaxAge is how long a subject's version (`latest`) is trusted before it
	// is asked again; ids and fixed versions never expire. Default 5m.
	MaxAge time.Duration
	// Timeout bounds one lookup, all URLs included. Default 2s.
	Timeout time.Duration
	// RetryAfter is how long a failed lookup is remembered before the
	// registry is asked again: stale schemas keep being served, cold ones
	// keep failing fast. Default 5s, at most MaxAge.
	RetryAfter time.Duration
	Logger     *slog.Logger
	// Now is the clock (tests move it); default time.Now.
	Now func() time.Time
}

// Registry is a catalog backed by a Schema Registry. Lookups by id are cached
// for good, by subject and version for MaxAge; concurrent misses for one key
// make one request; a registry that fails leaves cached schemas served (stale
// if need be) and is reported by Status.
type Registry struct {
	name     string
	cl       *sr.Client
	tr       *http.Transport
	opts     RegistryOptions
	log      *slog.Logger
	flight   singleflight.Group
	requests atomic.Uint64
	failures atomic.Uint64

	mu         sync.Mutex
	ids        map[int]Schema
	missingIDs map[int]time.Time // id → until when "not found" is remembered
	subjects   map[Ref]*subjectEntry
	healthy    bool
	since      time.Time
	lastErr    error
}

type subjectEntry struct {
	schema  Schema
	have    bool
	fetched time.Time // when schema was fetched
	err     error     // the last failure, if the last attempt failed
	retryAt time.Time // no request before this after a failure
	// refreshing is closed when the background refresh running ends.
	refreshing chan struct{}
}

// maxMissingIDs bounds the negative cache of ids: random ids in forged
// values must not grow memory without bound.
const maxMissingIDs = 1024

// NewRegistry returns a registry catalog. It makes no request: schemas are
// fetched on first use (the processor may warm them at load).
func NewRegistry(name string, o RegistryOptions) (*Registry, error) {
	if len(o.URLs) == 0 {
		return nil, fmt.Errorf("catalog %s: no registry URL", name)
	}
	if o.Token != "" && (o.Username != "" || o.Password != "") {
		return nil, fmt.Errorf("catalog %s: both a bearer token and basic credentials", name)
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 5 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = 5 * time.Second
	}
	o.RetryAfter = min(o.RetryAfter, o.MaxAge)
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Registry{
		name:       name,
		opts:       o,
		log:        o.Logger,
		ids:        make(map[int]Schema),
		missingIDs: make(map[int]time.Time),
		subjects:   make(map[Ref]*subjectEntry),
		healthy:    true,
		since:      o.Now(),
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = o.TLS
	opts := []sr.ClientOpt{
		sr.URLs(o.URLs...),
		sr.HTTPClient(&http.Client{Transport: countingTransport{tr, &r.requests}}),
		sr.UserAgent("kafka-ext-proc"),
	}
	if o.Username != "" || o.Password != "" {
		opts = append(opts, sr.BasicAuth(o.Username, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, sr.BearerToken(o.Token))
	}
	if o.Context != "" {
		opts = append(opts, sr.DefaultSchemaContext(o.Context))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", name, err)
	}
	r.cl, r.tr = cl, tr
	return r, nil
}

// Close waits for background refreshes (each bounded by Timeout) and
// releases the registry's idle connections, on reload or shutdown. Lookups
// still work after it; they dial anew.
func (r *Registry) Close() {
	r.mu.Lock()
	var running []chan struct{}
	for _, e := range r.subjects {
		if e.refreshing != nil {
			running = append(running, e.refreshing)
		}
	}
	r.mu.Unlock()
	for _, c := range running {
		<-c
	}
	r.tr.CloseIdleConnections()
}

// countingTransport counts the HTTP requests sent to the registry.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Uint64
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(req)
}

func (r *Registry) Name() string { return r.name }
func (r *Registry) Frames() bool { return true }

// RegistryStatus is what /readyz and the metrics report about a registry.
type RegistryStatus struct {
	Catalog string
	// Healthy is false while the last request to the registry failed
	// (unreachable, timeout, 5xx, auth); cached schemas are still served.
	Healthy bool
	Since   time.Time // when Healthy last changed
	// LastError is the last failure, if any (kept after recovery).
	LastError string
	// Requests counts HTTP requests sent; Failures counts lookups that
	// failed for a reason other than "not found".
	Requests, Failures uint64
	// Missing lists subjects (and ids) the registry said it does not have,
	// still remembered.
	Missing []string
}

// Status reports the registry's health and counters.
func (r *Registry) Status() RegistryStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RegistryStatus{Catalog: r.name, Healthy: r.healthy, Since: r.since,
		Requests: r.requests.Load(), Failures: r.failures.Load()}
	if r.lastErr != nil {
		st.LastError = r.lastErr.Error()
	}
	now := r.opts.Now()
	for ref, e := range r.subjects {
		if !e.have && errors.Is(e.err, ErrNotFound) && now.Before(e.retryAt) {
			st.Missing = append(st.Missing, ref.String())
		}
	}
	for id, until := range r.missingIDs {
		if now.Before(until) {
			st.Missing = append(st.Missing, "id "+strconv.Itoa(id))
		}
	}
	slices.Sort(st.Missing)
	return st
}

// Lookup returns the schema ref names: by id for good once fetched; by
// subject and fixed version for good; by subject and latest from the cache
// while younger than MaxAge, then still from the cache while it is
// refreshed in the background, so no request waits for the registry once a
// schema is cached. Only a cold lookup waits, bounded by Timeout.
func (r *Registry) Lookup(ctx context.Context, ref Ref) (Schema, error) {
	if ref.Subject == "" {
		return r.ByID(ctx, ref.ID)
	}
	now := r.opts.Now()
	r.mu.Lock()
	e := r.subjects[ref]
	if e == nil {
		e = &subjectEntry{}
		r.subjects[ref] = e
	}
	switch {
	case e.have:
		expired := ref.Version == 0 && now.Sub(e.fetched) >= r.opts.MaxAge
		failing := e.err != nil && now.Before(e.retryAt)
		if expired && !failing && e.refreshing == nil {
			e.refreshing = make(chan struct{})
			go r.refresh(context.WithoutCancel(ctx), ref, e)
		}
		s := e.schema
		r.mu.Unlock()
		return s, nil
	case e.err != nil && now.Before(e.retryAt):
		err := e.err
		r.mu.Unlock()
		return Schema{}, err
	}
	r.mu.Unlock()

	// The flight records its outcome itself, so a caller going away does not
	// leave the cache cold or the status unreported. It looks at the entry
	// again first: a flight that ended between this caller's look and its
	// joining has already filled it, and asking again would be a second
	// request for one cold schema.
	s, err := do(ctx, &r.flight, "s:"+ref.String(), func(ctx context.Context) (Schema, error) {
		r.mu.Lock()
		if e.have {
			s := e.schema
			r.mu.Unlock()
			return s, nil
		}
		r.mu.Unlock()
		return r.fetchSubject(ctx, ref, e)
	}, r.opts.Timeout)
	if err != nil && ctx.Err() != nil {
		return Schema{}, fmt.Errorf("catalog %s: subject %s: %w", r.name, ref, ctx.Err())
	}
	return s, err
}

// refresh fetches an expired subject version while the cached one is
// served.
func (r *Registry) refresh(ctx context.Context, ref Ref, e *subjectEntry) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	_, _ = r.fetchSubject(ctx, ref, e)
	r.mu.Lock()
	close(e.refreshing)
	e.refreshing = nil
	r.mu.Unlock()
}

// fetchSubject asks the registry for ref and records the outcome in e. On
// failure a cached schema is returned (stale) and the failure remembered
// for RetryAfter.
func (r *Registry) fetchSubject(ctx context.Context, ref Ref, e *subjectEntry) (Schema, error) {
	version := ref.Version
	if version == 0 {
		version = -1 // the client's "latest"
	}
	ss, err := r.cl.SchemaByVersion(ctx, ref.Subject, version)
	var s Schema
	if err == nil {
		s, err = r.complete(ctx, ss.ID, ss.Schema, 0)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		err = r.failed(fmt.Sprintf("subject %s", ref), err)
		e.err, e.retryAt = err, r.opts.Now().Add(r.opts.RetryAfter)
		if e.have {
			r.log.Warn("schema registry lookup failed; serving the cached schema", "catalog", r.name, "ref", ref.String(), "error", err)
			return e.schema, nil
		}
		return Schema{}, err
	}
	r.succeeded()
	e.schema, e.have, e.fetched, e.err = s, true, r.opts.Now(), nil
	r.ids[s.ID] = s
	return s, nil
}

// refreshed returns a channel closed when no background refresh of ref is
// running (for tests).
func (r *Registry) refreshed(ref Ref) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.subjects[ref]; e != nil && e.refreshing != nil {
		return e.refreshing
	}
	done := make(chan struct{})
	close(done)
	return done
}

// ByID returns the schema with this id, from the cache once fetched.
func (r *Registry) ByID(ctx context.Context, id int) (Schema, error) {
	r.mu.Lock()
	if s, ok := r.ids[id]; ok {
		r.mu.Unlock()
		return s, nil
	}
	if until, ok := r.missingIDs[id]; ok && r.opts.Now().Before(until) {
		r.mu.Unlock()
		return Schema{}, fmt.Errorf("catalog %s: id %d: %w", r.name, id, ErrNotFound)
	}
	r.mu.Unlock()

	s, err := do(ctx, &r.flight, "i:"+strconv.Itoa(id), func(ctx context.Context) (Schema, error) {
		r.mu.Lock()
		cached, ok := r.ids[id] // filled by a flight that ended before this one began
		r.mu.Unlock()
		if ok {
			return cached, nil
		}
		ss, err := r.cl.SchemaByID(ctx, id)
		var s Schema
		if err == nil {
			s, err = r.complete(ctx, id, ss, 0)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			err = r.failed("id "+strconv.Itoa(id), err)
			if errors.Is(err, ErrNotFound) {
				if len(r.missingIDs) >= maxMissingIDs {
					clear(r.missingIDs)
				}
				r.missingIDs[id] = r.opts.Now().Add(r.opts.RetryAfter)
			}
			return Schema{}, err
		}
		r.succeeded()
		r.ids[id] = s
		return s, nil
	}, r.opts.Timeout)
	if err != nil && ctx.Err() != nil {
		return Schema{}, fmt.Errorf("catalog %s: id %d: %w", r.name, id, ctx.Err())
	}
	return s, err
}

// maxRefDepth bounds reference chains (and so cycles).
const maxRefDepth = 16

// complete converts a registry schema, resolving its references (by subject
// and fixed version, cached for good) dependencies first.
func (r *Registry) complete(ctx context.Context, id int, s sr.Schema, depth int) (Schema, error) {
	out := Schema{ID: id, Text: s.Schema}
	switch s.Type {
	case sr.TypeAvro:
		out.Type = TypeAvro
	case sr.TypeProtobuf:
		out.Type = TypeProtobuf
	case sr.TypeJSON:
		out.Type = TypeJSON
	}
	if len(s.References) > 0 && depth >= maxRefDepth {
		return Schema{}, fmt.Errorf("references nested deeper than %d", maxRefDepth)
	}
	seen := map[string]bool{}
	for _, ref := range s.References {
		ss, err := r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return Schema{}, fmt.Errorf("reference %s (%s@%d): %w", ref.Name, ref.Subject, ref.Version, err)
		}
		dep, err := r.complete(ctx, ss.ID, ss.Schema, depth+1)
		if err != nil {
			return Schema{}, err
		}
		for _, d := range dep.Deps {
			if !seen[d.Name] {
				seen[d.Name] = true
				out.Deps = append(out.Deps, d)
			}
		}
		if !seen[ref.Name] {
			seen[ref.Name] = true
			dep.Deps = nil
			out.Deps = append(out.Deps, NamedSchema{Name: ref.Name, Schema: dep})
		}
	}
	return out, nil
}

// failed classifies a failed request (called with r.mu held): "not found"
// wraps ErrNotFound and shows the registry is up; anything else marks it
// unhealthy.
func (r *Registry) failed(what string, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		r.succeeded() // the registry answered
		return fmt.Errorf("catalog %s: %s: %w (%s)", r.name, what, ErrNotFound, re.Message)
	}
	r.failures.Add(1)
	err = fmt.Errorf("catalog %s: %s: %w", r.name, what, err)
	r.lastErr = err
	if r.healthy {
		r.healthy, r.since = false, r.opts.Now()
		r.log.Warn("schema registry unavailable", "catalog", r.name, "error", err)
	}
	return err
}

// succeeded marks the registry healthy (called with r.mu held).
func (r *Registry) succeeded() {
	if !r.healthy {
		r.healthy, r.since = true, r.opts.Now()
		r.log.Info("schema registry available again", "catalog", r.name)
	}
}

// do runs fn once for concurrent callers of key. fn runs without the
// callers' cancellation, bounded by timeout, so that a caller going away
// does not fail the others or leave the cache cold; each caller waits at
// most until its own ctx is done.
func do[T any](ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) (T, error), timeout time.Duration) (T, error) {
	ch := g.DoChan(key, func() (any, error) {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return fn(c)
	})
	select {
	case res := <-ch:
		v, _ := res.Val.(T)
		return v, res.Err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
