package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	rnd "math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// Reply soak: keyed request-replies (POST /orders/{id} with an
// idempotency-key, answered by the demo responder) for minutes at the
// processor's reply-index-bytes bound, with replays of orders chosen across
// the whole history mixed in. Once the bound is reached the index evicts
// the oldest replies, keeping where each lies, so a growing share of the
// replays asks for an evicted reply and the processor reads it back from
// the reply topic. It checks that every order and every replay is answered
// with its reply, counts the read-backs, and samples the processor's memory
// to tell whether it stays flat once the bound is reached.

// Defaults of the soak where the shared flags' defaults are for short
// windows: 8 clients for 8 minutes.
const (
	soakClients  = 8
	soakDuration = 8 * time.Minute
	// soakTimeout bounds one request: the processor's reply-timeout (30s
	// by default) answers first, with 504, unless the exchange itself
	// hangs.
	soakTimeout = 40 * time.Second
	// idempotencyHeader is the http-kafka binding's default.
	idempotencyHeader = "idempotency-key"
)

// soakOrder is one order in the soak's history: its id, and a hash of the
// reply its first answer carried, which every replay must answer again.
// A hash rather than the body: hundreds of thousands of orders.
type soakOrder struct {
	id    string
	reply uint64
	at    time.Time // when it was answered
}

// soakHistory is every order answered so far, for the replays to choose
// from.
type soakHistory struct {
	mu     sync.Mutex
	orders []soakOrder
}

func (h *soakHistory) add(o soakOrder) {
	h.mu.Lock()
	h.orders = append(h.orders, o)
	h.mu.Unlock()
}

// pick chooses an order uniformly across the whole history, or, with a
// window, across the orders answered within it: once the bound is reached
// more and more replays ask for an evicted reply. The window is nine
// tenths of the processor's idempotency-window and reply-retention
// (-replay-window), so every replay is one the processor must honour while
// those windows turn over: the processor counts from the record's
// timestamp, a little before the order was answered.
func (h *soakHistory) pick(r *rnd.Rand, window time.Duration) (soakOrder, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	from := 0
	if window > 0 {
		// Orders are added about in time order (clients race by a request
		// at most), so the first one within the window is found by search.
		cutoff := time.Now().Add(-window)
		from = sort.Search(len(h.orders), func(i int) bool { return h.orders[i].at.After(cutoff) })
	}
	if from == len(h.orders) {
		return soakOrder{}, false
	}
	return h.orders[from+r.IntN(len(h.orders)-from)], true
}

// soakTally is one client's count.
type soakTally struct {
	orders, replays int64
	// failures are answers other than 201 with the reply (202, 504, 410,
	// 503, …) and exchanges that failed; mismatches are replays answered
	// 201 with another body than their order's.
	failures, mismatches int64
	firstFailure         error
	orderLat, replayLat  hist
}

func (t *soakTally) fail(err error) {
	t.failures++
	if t.firstFailure == nil {
		t.firstFailure = err
	}
}

// soakSample is one periodic sample of the server side.
type soakSample struct {
	at  time.Duration // since the load started
	mem memory
	idx replyIndexSample
}

// soakRun is the state of one soak.
type soakRun struct {
	e       *env
	prefix  string // makes the run's ids its own on a reused broker
	body    int
	echo    responder.Handler
	seq     atomic.Int64
	history soakHistory
}

func hashOf(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// post sends order id (its body is a function of the id, so a replay
// sends the same bytes) with its idempotency key and returns the answer.
func (s *soakRun) post(ctx context.Context, client int, id string) (reply, []byte, error) {
	body := jsonValue(id, 1, s.body)
	path := "/orders/" + id
	c := s.e.procSide.client(client)
	req := newRequestWith(c, "POST", path, false,
		"content-type", "application/json", "content-length", strconv.Itoa(len(body)), idempotencyHeader, id)
	ctx, cancel := context.WithTimeout(ctx, soakTimeout)
	defer cancel()
	rep, err := exchangeBody(ctx, c, req, body)
	return rep, body, err
}

// order sends a new order and checks it is answered with the responder's
// echo of it.
func (s *soakRun) order(ctx context.Context, client int, t *soakTally) error {
	id := s.prefix + strconv.FormatInt(s.seq.Add(1), 10)
	t0 := time.Now()
	rep, body, err := s.post(ctx, client, id)
	if err != nil {
		return fmt.Errorf("order %s: %w", id, err)
	}
	want, err := s.echo(ctx, &responder.Request{Key: []byte(id), Value: body, Headers: []responder.Header{
		{Key: ":method", Value: []byte("POST")}, {Key: ":path", Value: []byte("/orders/" + id)}}})
	if err != nil || len(want) != 1 {
		return fmt.Errorf("the responder's echo of order %s: %d replies, %v", id, len(want), err)
	}
	if rep.status != 201 || !bytes.Equal(rep.body, want[0].Value) {
		return fmt.Errorf("order %s: %d with %.200q, want 201 with the responder's echo", id, rep.status, rep.body)
	}
	t.orderLat.add(time.Since(t0))
	t.orders++
	s.history.add(soakOrder{id: id, reply: hashOf(rep.body), at: time.Now()})
	return nil
}

// errMismatch marks a replay answered 201 with another reply than its
// order's.
var errMismatch = errors.New("a replay answered another reply than its order's")

// replay sends an earlier order again and checks it is answered exactly as
// the order was.
func (s *soakRun) replay(ctx context.Context, client int, o soakOrder, t *soakTally) error {
	t0 := time.Now()
	rep, _, err := s.post(ctx, client, o.id)
	if err != nil {
		return fmt.Errorf("replay of %s: %w", o.id, err)
	}
	if rep.status != 201 {
		return fmt.Errorf("replay of %s: %d with %.200q, want 201 with the order's reply", o.id, rep.status, rep.body)
	}
	if hashOf(rep.body) != o.reply {
		return fmt.Errorf("replay of %s: %w: %.200q", o.id, errMismatch, rep.body)
	}
	t.replayLat.add(time.Since(t0))
	t.replays++
	return nil
}

// client runs one client until end: orders, and every replayEvery-th
// request a replay.
func (s *soakRun) client(ctx context.Context, i int, end time.Time, opts *options, t *soakTally) {
	r := rnd.New(rnd.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
	for n := 1; time.Now().Before(end) && ctx.Err() == nil; n++ {
		var err error
		o, ok := soakOrder{}, false
		if n%opts.replayEvery == 0 {
			o, ok = s.history.pick(r, opts.replayWindow*9/10)
		}
		if ok {
			err = s.replay(ctx, i, o, t)
		} else {
			err = s.order(ctx, i, t)
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return // the run ends; not the processor's failure
		case errors.Is(err, errMismatch):
			t.mismatches++
			t.fail(err)
		default:
			t.fail(err)
		}
	}
}

// sample reads the server side's memory (with -split the child's alone,
// else this whole process's) and its reply index.
func (s *soakRun) sample(ctx context.Context, start time.Time) (soakSample, error) {
	m, ok, err := s.e.srv.memory(ctx, "")
	if err != nil {
		return soakSample{}, err
	}
	if !ok {
		m = sampleMemory()
	}
	idx, err := s.e.srv.replyIndex(ctx)
	if err != nil {
		return soakSample{}, err
	}
	return soakSample{at: time.Since(start), mem: m, idx: idx}, nil
}

// runReplySoak runs the soak; see the top of this file.
func runReplySoak(ctx context.Context, e *env, o *options) (*Result, error) {
	if err := e.srv.moreRoutes(ctx); err != nil {
		return nil, err
	}
	if err := e.srv.startResponder(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = e.srv.stopResponder(ctx) }()
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &soakRun{e: e, prefix: "soak-" + hex.EncodeToString(b[:]) + "-", body: o.soakBody, echo: responder.HTTPEcho()}

	// The first order once answered: the responder's consumer and the
	// reply index are ready. Retrying it is safe: it has a key.
	var probe soakTally
	if err := awaitRR(ctx, rrSide{name: "reply-soak", do: func(ctx context.Context, _ int) error { return s.order(ctx, 0, &probe) }}); err != nil {
		return nil, err
	}
	base, err := s.sample(ctx, time.Now())
	if err != nil {
		return nil, err
	}

	start := time.Now()
	end := start.Add(o.soakDuration)
	lctx, cancel := context.WithDeadline(ctx, end.Add(soakTimeout+loadGrace))
	defer cancel()
	tallies := make([]soakTally, o.soakClients)
	var wg sync.WaitGroup
	for i := range tallies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.client(lctx, i, end, o, &tallies[i])
		}()
	}
	loadDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(loadDone)
	}()

	// Samples while the load runs, then one after it: the last is the
	// end's memory.
	var samples []soakSample
	tick := time.NewTicker(o.sampleEvery)
	defer tick.Stop()
	var sampleErr error
	for done := false; !done; {
		select {
		case <-tick.C:
		case <-loadDone:
			done = true
		}
		sm, err := s.sample(ctx, start)
		if err != nil {
			sampleErr = err
			cancel()
			<-loadDone
			break
		}
		samples = append(samples, sm)
		e.log.Info("soak sample", "at", sm.at.Round(time.Second), "heap", sm.mem.Heap, "rss", sm.mem.RSS,
			"index_bytes", sm.idx.Bytes, "evicted", sm.idx.Evicted, "read_backs", sm.idx.readBacks(),
			"locations", sm.idx.Locations, "keys", sm.idx.Keys)
	}
	elapsed := time.Since(start)
	if sampleErr != nil {
		return nil, sampleErr
	}
	var t soakTally
	for i := range tallies {
		x := &tallies[i]
		t.orders += x.orders
		t.replays += x.replays
		t.failures += x.failures
		t.mismatches += x.mismatches
		if t.firstFailure == nil {
			t.firstFailure = x.firstFailure
		}
		t.orderLat.merge(&x.orderLat)
		t.replayLat.merge(&x.replayLat)
	}
	res := soakResult(e, o, s, base, samples, &t, elapsed)
	if t.failures > 0 {
		return res, fmt.Errorf("%d answers failed (%d mismatched); first: %w", t.failures, t.mismatches, t.firstFailure)
	}
	if !res.hasFigure("bound_reached_s") {
		return res, fmt.Errorf("the reply index never reached reply-index-bytes in %v: raise -soak-body or -duration", o.soakDuration)
	}
	return res, nil
}

// soakResult reports the soak: the tallies, the read-backs over the run,
// and memory at the first sample after the bound was reached against the
// last.
func soakResult(e *env, o *options, s *soakRun, base soakSample, samples []soakSample, t *soakTally, elapsed time.Duration) *Result {
	res := newResult(scenarioReplySoak, e.split)
	res.param("clients", o.soakClients)
	res.param("conns", o.conns)
	res.param("duration", o.soakDuration.String())
	res.param("body_bytes", s.body)
	res.param("replay_every", o.replayEvery)
	if o.replayWindow > 0 {
		res.param("replay_window", o.replayWindow.String())
	}
	res.param("sample_every", o.sampleEvery.String())
	if o.limits != "" {
		res.param("limits", o.limits)
	}
	// Where the memory samples come from: with -split the server process,
	// which runs the processor and the responder, the broker staying here.
	memOf := "load process (clients, broker, responder, processor)"
	if e.split {
		memOf = "server process (processor, responder)"
	}
	res.param("memory_of", memOf)
	last := samples[len(samples)-1]
	res.figure("orders", t.orders)
	res.figure("replays", t.replays)
	res.figure("req_per_s", float64(t.orders+t.replays)/elapsed.Seconds())
	res.figure("failures", t.failures)
	res.figure("mismatches", t.mismatches)
	res.target("failures", "0")
	res.target("mismatches", "0")
	readBacks := last.idx.readBacks() - base.idx.readBacks()
	res.figure("replays_from_memory", t.replays-readBacks)
	res.figure("replays_read_back", readBacks)
	res.figure("read_backs", map[string]int64{
		"found": last.idx.Found - base.idx.Found, "expired": last.idx.Expired - base.idx.Expired, "failed": last.idx.Failed - base.idx.Failed})
	res.figure("read_back_p50_ms_le", last.idx.readBackQuantileMs(base.idx, 50))
	res.figure("read_back_p99_ms_le", last.idx.readBackQuantileMs(base.idx, 99))
	if readBacks > 0 {
		res.figure("read_back_mean_ms", (last.idx.ReadBackSum-base.idx.ReadBackSum)/float64(readBacks)*1000)
	}
	res.figures("order", t.orderLat.summary())
	res.figures("replay", t.replayLat.summary())
	res.figure("evicted", last.idx.Evicted-base.idx.Evicted)
	res.figure("index_bytes", last.idx.Bytes)
	res.figure("index_entries", last.idx.Entries)
	res.figure("locations", last.idx.Locations)
	res.figure("location_bytes", last.idx.LocationBytes)
	mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
	heap := make([]float64, len(samples))
	rss := make([]float64, len(samples))
	for i, sm := range samples {
		heap[i], rss[i] = mib(sm.mem.Heap), mib(sm.mem.RSS)
	}
	res.figure("heap_mib_samples", heap)
	res.figure("rss_mib_samples", rss)
	// The bound is reached when the index first evicts: from then on it
	// holds reply-index-bytes and what grows is the locations.
	bi := -1
	for i, sm := range samples {
		if sm.idx.Evicted > base.idx.Evicted {
			bi = i
			break
		}
	}
	if bi < 0 {
		return res
	}
	bound := samples[bi]
	res.figure("bound_reached_s", bound.at.Seconds())
	res.figure("bound_heap_mib", mib(bound.mem.Heap))
	res.figure("end_heap_mib", mib(last.mem.Heap))
	res.figure("bound_rss_mib", mib(bound.mem.RSS))
	res.figure("end_rss_mib", mib(last.mem.RSS))
	res.figure("bound_location_bytes", bound.idx.LocationBytes)
	res.figure("keys", last.idx.Keys)
	// What grows past the bound, by design: each new order adds an
	// evicted reply's location (until reply-retention) and an idempotency
	// key (up to idempotency-keys). The heap's growth per order set beside
	// those says whether anything else grows.
	if n := last.idx.Keys - bound.idx.Keys; n > 0 {
		res.figure("heap_growth_mib", mib(last.mem.Heap)-mib(bound.mem.Heap))
		res.figure("location_growth_mib", float64(last.idx.LocationBytes-bound.idx.LocationBytes)/(1<<20))
		res.figure("heap_growth_per_order_b", (float64(last.mem.Heap)-float64(bound.mem.Heap))/float64(n))
	}
	res.ratio("heap_ratio", ratio(float64(last.mem.Heap), float64(bound.mem.Heap)),
		"live heap after a collection, at the end ÷ when the bound was reached", "≤ 1.1")
	steadyFigures(res, o, samples, bi)
	if bound.mem.RSS > 0 {
		res.ratio("rss_ratio", ratio(float64(last.mem.RSS), float64(bound.mem.RSS)),
			"resident set, at the end ÷ when the bound was reached", "≤ 1.1")
	}
	return res
}

// hasFigure says whether r measured name.
func (r *Result) hasFigure(name string) bool {
	for _, f := range r.Figures {
		if f.Name == name {
			return true
		}
	}
	return false
}

// steadyFigures report memory once it can be flat. Past the bound, each
// order still adds what the processor keeps for its windows: an evicted
// reply's location until reply-retention, an idempotency key until twice
// idempotency-window. With -replay-window (both windows), they have
// turned over from twice the window on: from the first sample then (and
// past the bound) to the end, the heap must be flat.
func steadyFigures(res *Result, o *options, samples []soakSample, bound int) {
	if o.replayWindow <= 0 {
		return
	}
	si := -1
	for i := bound; i < len(samples); i++ {
		if samples[i].at >= 2*o.replayWindow {
			si = i
			break
		}
	}
	last := samples[len(samples)-1]
	if si < 0 || si == len(samples)-1 {
		return // the run ended before the windows turned over
	}
	steady := samples[si]
	mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
	res.figure("steady_from_s", steady.at.Seconds())
	res.figure("steady_heap_mib", mib(steady.mem.Heap))
	var lo, hi uint64 = steady.mem.Heap, steady.mem.Heap
	for _, sm := range samples[si:] {
		lo, hi = min(lo, sm.mem.Heap), max(hi, sm.mem.Heap)
	}
	res.figure("steady_heap_min_max_mib", []float64{mib(lo), mib(hi)})
	res.figure("steady_locations", []int64{steady.idx.Locations, last.idx.Locations})
	res.figure("steady_keys", []int64{steady.idx.Keys, last.idx.Keys})
	res.ratio("steady_heap_ratio", ratio(float64(last.mem.Heap), float64(steady.mem.Heap)),
		"live heap after a collection, at the end ÷ once the windows turned over (twice -replay-window, past the bound)", "≤ 1.1")
}
