package httpkafka

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httphdr"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// ViewSource opens views of a topic on the route's cluster, held until the
// caller releases them.
type ViewSource interface {
	HoldView(ctx context.Context, topic string, wait time.Duration) (*views.View, error)
}

// viewHandles is a ViewSource that also gives a topic's handle
// (views.Views does): a route of a static topic holds its view through
// it, without the look-up by topic.
type viewHandles interface {
	Handle(topic string) *views.Handle
}

// FetchRequest is what a fetch needs of an HTTP request.
type FetchRequest struct {
	Params      map[string]string // path parameters
	Identities  map[string]string // guard name → identity
	IfNoneMatch []string          // every if-none-match value
	Prefer      []string          // every prefer value
	// Limits are those of the route snapshot the request matched in, so a
	// route's answers follow the limits in force, not its first request's.
	Limits config.Limits
}

// fetchRequest reads a FetchRequest off a matched request.
func fetchRequest(req *handler.HTTPRequest) FetchRequest {
	return FetchRequest{
		Params:      req.Match.Params,
		Identities:  kafkaroute.Identities(req.Match.Identities),
		IfNoneMatch: req.Headers.Values("if-none-match"),
		Prefer:      req.Headers.Values("prefer"),
		Limits:      req.Limits,
	}
}

// Fetch answers the requests of one fetch route from a view of its topic.
type Fetch struct {
	with   *config.With
	source ViewSource
	handle *views.Handle // the static topic's, when source gives one

	// cache holds rendered answers per selection (resolved filters), valid
	// for one view version: a write renders each selection once, however
	// many requests or waiters read it.
	mu    sync.Mutex
	cache map[string]*cached

	waiting   atomic.Int64 // requests holding a long poll now
	deadlines deadlines    // the long polls' deadlines
}

// Waiting is the number of requests of this route holding a long poll.
func (f *Fetch) Waiting() int64 { return f.waiting.Load() }

type cached struct {
	// serial is the view's (views.View.Serial): a view rebuilt after its
	// topic was recreated counts versions from the start again, and must
	// not be answered from its predecessor's renders.
	serial  uint64
	version uint64
	ans     answer
}

// maxCached bounds the render cache of one route.
const maxCached = 4096

// NewFetch compiles a fetch route.
func NewFetch(with *config.With, source ViewSource) *Fetch {
	f := &Fetch{with: with, source: source, cache: map[string]*cached{}}
	if hs, ok := source.(viewHandles); ok && with.Topic.Static() {
		f.handle = hs.Handle(with.Topic.Raw)
	}
	return f
}

// hold holds the view of topic: through the route's handle when its topic
// is static, else by topic.
func (f *Fetch) hold(ctx context.Context, topic string, wait time.Duration) (*views.View, error) {
	if f.handle != nil {
		return f.handle.Hold(ctx, wait)
	}
	return f.source.HoldView(ctx, topic, wait)
}

// answer is the state of a selection in a view.
type answer struct {
	err         error // the view could not be read: 503, whatever else is set
	status      int   // 200, 204 or 404
	tag         string
	quoted      string // the tag in quotes, as sent; "" when not built yet
	body        []byte
	contentType string
}

// etag is the answer's etag header value.
func (a answer) etag() string {
	if a.quoted != "" {
		return a.quoted
	}
	return httphdr.Quote(a.tag)
}

// selection is a route's filters with the request's values substituted.
type selection struct {
	filters []filter // ORed; none = every record
	keyOnly bool     // every filter names a key: look-ups, no scan
	id      string   // cache key
}

type filter struct {
	key     *string // nil: none; else &keyVal
	keyVal  string
	headers [][2]string
}

// Serve answers one request: at once, or, with `prefer: wait=N` and a
// matching `if-none-match` (or a missing record), when the answer changes,
// N runs out, ctx ends (the client left) or drain ends (the process stops:
// the current state is sent).
func (f *Fetch) Serve(ctx, drain context.Context, req FetchRequest) *handler.HTTPResponse {
	refs := &kafkaroute.Refs{Params: req.Params, Identities: req.Identities}
	topic, err := kafkaroute.Topic(f.with, refs.Resolve)
	if err != nil {
		return handler.ProblemResponse(http.StatusBadRequest, err.Error())
	}
	sel := f.selection(refs.Resolve)
	inm := httphdr.ParseIfNoneMatch(req.IfNoneMatch)
	prefs := httphdr.ParsePrefer(req.Prefer)
	var deadline time.Time // none (zero): no wait
	var applied string     // preference-applied, sent only on an answer that waited
	if prefs.WaitSet {
		wait := min(prefs.Wait, req.Limits.MaxWait)
		applied = "wait=" + strconv.Itoa(int(wait/time.Second))
		deadline = time.Now().Add(wait)
	}

	// Nothing of req is used past this point but the timeout: kept apart, so
	// that req (the route match, its parameters) is not live during a long
	// poll's wait, which holds thousands of requests.
	kafkaTimeout := req.Limits.KafkaTimeout

	// A view found gone (its topic deleted or recreated) is let go of and
	// the topic's view held anew: the topic's new generation, or the
	// answer of a missing topic. A topic that keeps changing under the
	// request is answered 503 after a few views.
	for range maxGoneViews {
		view, err := f.hold(ctx, topic, kafkaTimeout)
		if err != nil {
			return f.viewFailure(ctx, err, topic)
		}
		// A tag ahead of this replica (another replica answered the client):
		// wait, bounded, until this view has read what the client has seen.
		f.waitUntilCaughtUp(ctx, drain, view, inm, kafkaTimeout)
		resp := f.answerOrWait(ctx, drain, view, sel, inm, prefs.WaitSet, applied, deadline, topic)
		view.Release()
		if resp != nil {
			return resp
		}
	}
	return unavailable(fmt.Sprintf("topic %q was deleted or recreated repeatedly while the request read it; retry", topic))
}

// maxGoneViews bounds the views of a topic one request holds in turn, each
// found gone (see Serve).
const maxGoneViews = 3

// viewFailure answers a request whose topic's view cannot be held.
func (f *Fetch) viewFailure(ctx context.Context, err error, topic string) *handler.HTTPResponse {
	switch {
	case errors.Is(err, views.ErrTopicDeleted) && !f.with.Topic.Static():
		return handler.ProblemResponse(http.StatusNotFound, fmt.Sprintf(
			"topic %q does not exist: it was deleted while the processor read it, and its records are no longer served", topic))
	case errors.Is(err, views.ErrTopicDeleted):
		return unavailable(fmt.Sprintf("the route's topic %q was deleted from Kafka while the processor read it: "+
			"its records are no longer served; recreate the topic to serve the route again (from the new topic's records alone), or remove the route", topic))
	case errors.Is(err, client.ErrUnknownTopic) && !f.with.Topic.Static():
		return handler.ProblemResponse(http.StatusNotFound, fmt.Sprintf("topic %q does not exist", topic))
	case errors.Is(err, views.ErrTooManyViews):
		return unavailable(fmt.Sprintf("cannot open a view of topic %q now: %v", topic, err))
	case errors.Is(err, client.ErrUnknownTopic):
		return unavailable(fmt.Sprintf("the route's topic %q does not exist in Kafka", topic))
	case ctx.Err() != nil:
		return handler.ProblemResponse(http.StatusServiceUnavailable, "the request was cancelled") // nobody reads this
	}
	return unavailable(fmt.Sprintf("the view of topic %q is not ready: %v", topic, err))
}

// answerOrWait answers from the view, or, while the answer is what the client
// has (its if-none-match, or, without a tag, a missing record it waits for),
// waits for a change until deadline, ctx or drain. A client with a tag that no
// longer matches is answered at once, a 404 too: the record it had was deleted,
// and a change that would alter the answer reaches every waiter at once
// (docs/design.md#http-kafka-fetch). preference-applied is sent only on an
// answer that waited. It returns nil when the view is gone (its topic was
// deleted or recreated), which wakes its waiters: nothing is answered from
// it, and the caller holds the topic's view anew.
func (f *Fetch) answerOrWait(ctx, drain context.Context, view *views.View, sel selection, inm httphdr.IfNoneMatch,
	waitSet bool, applied string, deadline time.Time, topic string) *handler.HTTPResponse {
	waited := ""
	detached := false
	for {
		if view.Gone() != nil {
			return nil // the caller holds the topic's view anew
		}
		ans := f.answer(view, sel)
		if ans.err != nil {
			return unavailable(fmt.Sprintf("the view of topic %q cannot be read now: %v", topic, ans.err))
		}
		// Asked only of an answer the client already has: a new one goes
		// at once, without reading the clock.
		waiting := func() bool { return ctx.Err() == nil && drain.Err() == nil && time.Now().Before(deadline) }
		switch {
		case inm.Present() && inm.Matches(ans.tag):
			if !waiting() {
				return notModified(ans, waited)
			}
		case ans.status == http.StatusNotFound && waitSet && len(inm.Tags) == 0:
			if !waiting() {
				return notFound(topic, waited)
			}
		default:
			return ans.reply(waited)
		}
		if !detached {
			detached = true
			detach(&sel, &inm)
			if !f.with.Topic.Static() {
				topic = strings.Clone(topic)
			}
		}
		// Only a request that waits registers a watch (it takes the view's
		// write lock). Read again after registering: a write between the
		// first read and the registration is then seen, not missed.
		kw, changed := f.watch(view, sel)
		if again := f.answer(view, sel); again.tag != ans.tag || again.status != ans.status {
			kw.Stop()
			continue
		}
		waited = applied
		// Three channels, not four: the drain closes the deadline's.
		dl := f.deadlines.wait(drain, deadline)
		f.waiting.Add(1)
		select {
		case <-changed:
		case <-dl.ch:
		case <-ctx.Done():
		}
		f.waiting.Add(-1)
		f.deadlines.release(dl)
		kw.Stop()
	}
}

// detach copies the strings a long poll keeps for its whole wait (the key
// and header values it selects, the client's tags) out of the request's
// headers: they point into the one string holding all of the request's
// header values, which would otherwise stay alive with every waiter.
func detach(sel *selection, inm *httphdr.IfNoneMatch) {
	for i := range sel.filters {
		r := &sel.filters[i]
		r.keyVal = strings.Clone(r.keyVal)
		for j := range r.headers {
			r.headers[j][1] = strings.Clone(r.headers[j][1])
		}
	}
	for i, t := range inm.Tags {
		inm.Tags[i] = strings.Clone(t)
	}
}

// waitUntilCaughtUp waits (at most kafka-timeout) while the client's tag
// names offsets this view has not read yet.
func (f *Fetch) waitUntilCaughtUp(ctx, drain context.Context, view *views.View, inm httphdr.IfNoneMatch, kafkaTimeout time.Duration) {
	var need []map[int32]int64
	for _, t := range inm.Tags {
		if offs, ok := tagOffsets(view, t); ok && behind(view, offs) {
			need = append(need, offs)
		}
	}
	if len(need) == 0 {
		return
	}
	timer := time.NewTimer(kafkaTimeout)
	defer timer.Stop()
	for {
		changed := view.Changed()
		caught := true
		for _, offs := range need {
			if behind(view, offs) {
				caught = false
			}
		}
		if caught {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		case <-drain.Done():
			return
		}
	}
}

func (f *Fetch) selection(resolve func(config.TemplatePart) string) selection {
	sel := selection{keyOnly: len(f.with.Filters) > 0}
	if len(f.with.Filters) > 0 {
		sel.filters = make([]filter, len(f.with.Filters))
	}
	for i, fl := range f.with.Filters {
		r := &sel.filters[i]
		if fl.Key != nil {
			// The key lives in the filter itself: no allocation of its own.
			r.keyVal = fl.Key.Expand(resolve)
			r.key = &r.keyVal
		} else {
			sel.keyOnly = false
		}
		for _, h := range fl.Headers {
			r.headers = append(r.headers, [2]string{h.Name, h.Value.Expand(resolve)})
		}
	}
	if !sel.single() {
		sel.id = sel.cacheKey()
	}
	return sel
}

// single: one key looked up, answered without the render cache.
func (sel selection) single() bool { return sel.keyOnly && len(sel.filters) == 1 }

// cacheKey identifies the resolved filters in the render cache.
func (sel selection) cacheKey() string {
	var id strings.Builder
	for _, r := range sel.filters {
		if r.key != nil {
			id.WriteString("k")
			id.WriteString(strconv.Quote(*r.key))
		}
		for _, h := range r.headers {
			id.WriteString("h")
			id.WriteString(strconv.Quote(h[0]))
			id.WriteString(strconv.Quote(h[1]))
		}
		id.WriteString("|")
	}
	return id.String()
}

func (fl filter) matches(e *views.Entry) bool {
	if fl.key != nil && e.Key != *fl.key {
		return false
	}
	for _, h := range fl.headers {
		v, ok := e.Header(h[0])
		if !ok || string(v) != h[1] {
			return false
		}
	}
	return true
}

func (sel selection) matches(e *views.Entry) bool {
	if len(sel.filters) == 0 {
		return true
	}
	for _, fl := range sel.filters {
		if fl.matches(e) {
			return true
		}
	}
	return false
}

// watch returns a channel closed when the selection may have changed: the
// key's own channel for a single-key selection, so a write elsewhere wakes
// nobody (with the watch to stop); the view's coalesced change channel
// otherwise (with a zero watch).
func (f *Fetch) watch(view *views.View, sel selection) (views.KeyWatch, <-chan struct{}) {
	if sel.single() {
		kw := view.WatchKey(*sel.filters[0].key)
		return kw, kw.C
	}
	return views.KeyWatch{}, view.Changed()
}

// matching appends the selected entries to out in (partition, offset) order.
// It fails when a view on disk cannot read its store: the answer would
// leave records out.
func (f *Fetch) matching(out []views.Entry, view *views.View, sel selection) ([]views.Entry, error) {
	if sel.keyOnly {
		var seen map[string]bool // a key named twice is one record
		if len(sel.filters) > 1 {
			seen = make(map[string]bool, len(sel.filters))
		}
		for _, fl := range sel.filters {
			if seen[*fl.key] {
				continue
			}
			if seen != nil {
				seen[*fl.key] = true
			}
			e, ok, err := view.Lookup(*fl.key)
			if err != nil {
				return nil, err
			}
			if ok && sel.matches(&e) {
				out = append(out, e)
			}
		}
	} else {
		err := view.Scan(func(e views.Entry) bool {
			if sel.matches(&e) {
				out = append(out, e)
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b views.Entry) int {
		if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	return out, nil
}

func (f *Fetch) answer(view *views.View, sel selection) answer {
	// Single-key look-ups are cheaper than the cache, and need no version.
	var version uint64
	if !sel.single() {
		version = view.Version()
		f.mu.Lock()
		c, ok := f.cache[sel.id]
		f.mu.Unlock()
		if ok && c.version == version && c.serial == view.Serial() {
			return c.ans
		}
	}
	// A single key's entry stays on the stack.
	var one [1]views.Entry
	entries, err := f.matching(one[:0], view, sel)
	if err != nil {
		return answer{err: err} // not cached: the next request reads again
	}
	var ans answer
	if f.with.Merge != nil {
		ans = renderMerged(view, entries)
	} else {
		ans = renderSingle(view, entries)
	}
	if !sel.single() {
		f.mu.Lock()
		if len(f.cache) >= maxCached {
			clear(f.cache)
		}
		f.cache[sel.id] = &cached{serial: view.Serial(), version: version, ans: ans}
		f.mu.Unlock()
	}
	return ans
}

// renderSingle picks the winner: highest timestamp, then partition, then offset.
func renderSingle(view *views.View, entries []views.Entry) answer {
	if len(entries) == 0 {
		return answer{status: http.StatusNotFound}
	}
	w := &entries[0]
	for i := range entries[1:] {
		e := &entries[1+i]
		if e.Timestamp > w.Timestamp || (e.Timestamp == w.Timestamp && (e.Partition > w.Partition ||
			(e.Partition == w.Partition && e.Offset > w.Offset))) {
			w = e
		}
	}
	var recordTag string
	if t, ok := w.Header("etag"); ok && httphdr.ValidTag(string(t)) {
		recordTag = string(t)
	}
	q := quotedSingleTag(view, w, recordTag)
	ans := answer{status: http.StatusOK, tag: q[1 : len(q)-1], quoted: q, body: w.Value}
	if ct, ok := w.Header("content-type"); ok && len(ct) > 0 {
		ans.contentType = contentType(ct)
	} else {
		// Envoy would call a body without a content-type text/plain.
		ans.contentType = "application/octet-stream"
	}
	if len(w.Value) == 0 {
		ans.status = http.StatusNoContent
	}
	return ans
}

// contentType is a record's content-type header as a string, shared for the
// common types: most records carry one of them, and converting the header
// for every answer cost an allocation each.
func contentType(ct []byte) string {
	switch string(ct) {
	case "application/json":
		return "application/json"
	case "application/octet-stream":
		return "application/octet-stream"
	case "text/plain":
		return "text/plain"
	case "text/plain; charset=utf-8":
		return "text/plain; charset=utf-8"
	}
	return string(ct)
}

// renderMerged renders the JSON array of the entries' values; null, empty
// and non-JSON values are left out.
func renderMerged(view *views.View, entries []views.Entry) answer {
	size := 2
	for _, e := range entries {
		size += len(e.Value) + 1
	}
	var b bytes.Buffer
	b.Grow(size)
	b.WriteByte('[')
	first := true
	included := make([]views.Entry, 0, len(entries))
	for _, e := range entries {
		if len(e.Value) == 0 || !json.Valid(e.Value) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(bytes.TrimSpace(e.Value))
		included = append(included, e)
	}
	b.WriteByte(']')
	return answer{status: http.StatusOK, tag: mergedTag(view, included), body: b.Bytes(), contentType: "application/json"}
}

func (a answer) reply(applied string) *handler.HTTPResponse {
	if a.status == http.StatusNotFound {
		return withApplied(handler.ProblemResponse(http.StatusNotFound, "no record matches"), applied)
	}
	// The response with room for its content-type, etag and
	// preference-applied: one allocation.
	rh := &struct {
		r  handler.HTTPResponse
		hs [3]route.Header
	}{r: handler.HTTPResponse{Status: a.status}}
	r := &rh.r
	r.Headers = rh.hs[:0]
	if a.status == http.StatusOK {
		r.Headers = append(r.Headers, route.Header{Name: "content-type", Value: a.contentType})
		r.Body = a.body
	}
	r.Headers = append(r.Headers, route.Header{Name: "etag", Value: a.etag()})
	return withApplied(r, applied)
}

// notModified carries the 200's etag and no content-type: RFC 9110
// §15.4.5 asks a 304 for the validators a cache needs and no other
// representation metadata, and Envoy removes content-type from every
// bodyless local reply anyway (Utility::prepareLocalReply).
func notModified(a answer, applied string) *handler.HTTPResponse {
	hs := make([]route.Header, 0, 2) // etag, preference-applied
	hs = append(hs, route.Header{Name: "etag", Value: a.etag()})
	r := &handler.HTTPResponse{Status: http.StatusNotModified, Headers: hs}
	return withApplied(r, applied)
}

func notFound(topic, applied string) *handler.HTTPResponse {
	return withApplied(handler.ProblemResponse(http.StatusNotFound, "no record matches in topic "+strconv.Quote(topic)), applied)
}

func withApplied(r *handler.HTTPResponse, applied string) *handler.HTTPResponse {
	if applied != "" {
		r.Headers = append(r.Headers, route.Header{Name: "preference-applied", Value: applied})
	}
	return r
}

// unavailable is 503 with retry-after: Kafka is unreachable or the view is
// still catching up; a retry soon is expected to work.
func unavailable(detail string) *handler.HTTPResponse {
	return handler.ProblemResponse(http.StatusServiceUnavailable, detail, route.Header{Name: "retry-after", Value: "1"})
}
