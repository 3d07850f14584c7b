package logtails

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"golang.org/x/sync/errgroup"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/follow"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// StreamOptions describe a stream to open.
type StreamOptions struct {
	Topic  string
	Framer Framer
	// Start is the position to resume from (next offset by partition, from a
	// message id); partitions it does not name start at the earliest offset.
	// nil: every partition from the earliest offset. A position below the
	// log start or beyond its end is refused with a *GapError.
	Start map[int32]int64
	// Compacted: the history is the topic's view (the current record per
	// key, in partition and offset order), not the retained log. Ignored
	// for a topic with a decoder (Options.Decoders): its view holds
	// values its converter made for HTTP, not what streams send, so the
	// history is the retained log.
	Compacted bool
	Filters   []Filter // ORed; none: every record
	// LagBudget is how many records the stream may fall behind the tail
	// before it is told so (Lagged) and Next fails with ErrLagged.
	LagBudget int
}

// Stream is one stream's reader: history, then the ring, until closed.
// Next and Peek are for one goroutine; Lagged and Close for any.
type Stream struct {
	l      *Tails
	t      *logTopic
	r      *ring
	opts   StreamOptions
	shared bool // the stream frames as the ring does

	next []int64 // position: next offset dispatched up to, per partition
	// from is, per partition the client did not name, where the stream
	// started (the log start when the tail started); -1 for a named one.
	// A partition still there that finds the log start moved moves with
	// it: the client asked for the log from its start.
	from []int64

	phase   int
	view    []views.Entry // compacted history still to send
	viewEnd []int64

	cur     *cursor
	seq     uint64
	ringPos []int64 // the ring's positions at seq, until aligned
	diff    int     // partitions where next and ringPos differ
	aligned bool    // next equals the ring's positions: shared frames fit

	run     []byte  // shared frames being gathered (a slice of a slab block)
	bufp    *[]byte // pooled buffer for copied or per-stream frames
	buf     []byte
	pending []byte // a chunk Peek prepared
	peeked  bool
	first   []client.Header // headers of the first record sent, once known
	gotHdr  bool
	closed  bool
	// later is the error the stream ends with once the frames gathered
	// before it are sent: a decoder's ErrLater (before the record it
	// stopped at), or a *GapError a history read found.
	later error
}

const (
	phaseView = iota
	phaseHistory
	phaseRing
)

// Open starts a stream on a topic. It fails with ErrUnknownTopic,
// ErrNotReady (the tail or the view did not start within ctx), a *GapError
// (the resume position is not in the log) or ErrClosed.
//
// Resuming from a message id of a stream that ended with
// ErrPartitionsChanged continues with no gap and no repeat: the id names the
// partitions the topic had, and the new ones, which the id does not name,
// start at the earliest offset.
func (l *Tails) Open(ctx context.Context, o StreamOptions) (*Stream, error) {
	if o.LagBudget <= 0 {
		o.LagBudget = l.opts.RingRecords
	}
	t, err := l.acquireAt(ctx, o)
	if err != nil {
		return nil, err
	}
	s := &Stream{l: l, t: t, r: t.ring, opts: o, shared: o.Framer == t.ring.framer, phase: phaseHistory}
	s.cur = &cursor{budget: uint64(o.LagBudget), lagged: make(chan struct{})}
	s.next = append([]int64(nil), t.lo...)
	s.from = append([]int64(nil), t.lo...)
	if o.Start != nil {
		for p, off := range o.Start {
			s.next[p] = off
			s.from[p] = -1 // asked for: a gap below it is the client's to know
		}
	}
	if o.Compacted && t.decode == nil {
		if err := s.snapshot(ctx); err != nil {
			l.release(t)
			return nil, err
		}
	}
	return s, nil
}

// acquireAt acquires the topic's tail and checks the stream's resume
// position against it. A position refused as past the end (or whose log
// bounds could not be read) is answered only once the topic is described
// as the ring knows it: otherwise the ring is of a generation deleted
// since (the partition check has not run yet), its tail is retired and the
// position is checked on a fresh one.
func (l *Tails) acquireAt(ctx context.Context, o StreamOptions) (*logTopic, error) {
	for attempt := 0; ; attempt++ {
		t, err := l.acquire(ctx, o.Topic, o.Framer, o.LagBudget)
		if err != nil || o.Start == nil {
			return t, err
		}
		err = l.checkPosition(ctx, t, o.Start)
		if err == nil {
			return t, nil
		}
		// One retry: a second stale ring would mean the topic changes
		// faster than a resume can be checked.
		if attempt == 0 && staleSign(err) && l.retireIfChanged(ctx, t) {
			l.release(t)
			continue
		}
		l.release(t)
		return nil, err
	}
}

// staleSign reports whether a refused resume may come of a stale ring:
// past its end, or its log bounds unreadable (partitions the topic no
// longer has).
func staleSign(err error) bool {
	var gap *GapError
	return errors.As(err, &gap) && gap.Cause == BeyondEnd || errors.Is(err, client.ErrNotReady)
}

// checkPosition checks a resume position against the log: a position at
// the end the tail saw is there; any other is checked against the
// partition's watermarks, asked of the broker (also when the ring holds it:
// a resume is told of records removed from the log whether or not the ring
// still holds them, the same whichever replica it reaches). A position past the end (or naming a
// partition the topic lacks) is a *GapError BeyondEnd, one below the log
// start a *GapError Truncated.
func (l *Tails) checkPosition(ctx context.Context, t *logTopic, start map[int32]int64) error {
	ends := t.ring.ends()
	var beyond []Gap
	check := false
	for p, off := range start {
		if int(p) >= len(ends) {
			beyond = append(beyond, Gap{Partition: p, Asked: off, LogStart: -1, LogEnd: -1})
		} else if off != ends[p] { // at the tail there is nothing to read before what comes next
			check = true
		}
	}
	if len(beyond) > 0 {
		sortGaps(beyond)
		return &GapError{Topic: t.name, Cause: BeyondEnd, Gaps: beyond, Resume: map[int32]int64{}}
	}
	if !check {
		return nil
	}
	// Two requests whatever the number of partitions.
	lo, hi, err := l.logBounds(ctx, t)
	if err != nil {
		return err
	}
	starts := map[int32]int64{}
	for p, off := range start {
		t.ring.noteEnd(p, hi[p])
		if off > hi[p] {
			beyond = append(beyond, Gap{Partition: p, Asked: off, LogStart: lo[p], LogEnd: hi[p]})
		}
		starts[p] = lo[p]
	}
	if len(beyond) > 0 {
		sortGaps(beyond)
		return &GapError{Topic: t.name, Cause: BeyondEnd, Gaps: beyond, Resume: map[int32]int64{}}
	}
	if g := truncatedGap(t.name, start, starts); g != nil {
		return g
	}
	return nil
}

// logBounds reads the log start and end of every partition of t's ring.
// The two requests go together: one after the other they were most of a
// resume's wall time.
func (l *Tails) logBounds(ctx context.Context, t *logTopic) (lo, hi []int64, err error) {
	n := t.ring.partitions
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		lo, err = follow.ListOffsets(gctx, l.admin, t.name, n, kafka.EarliestOffsetSpec, l.opts.KafkaTimeout)
		return err
	})
	g.Go(func() (err error) {
		hi, err = follow.ListOffsets(gctx, l.admin, t.name, n, kafka.LatestOffsetSpec, l.opts.KafkaTimeout)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, fmt.Errorf("%w: reading the log bounds of %s to check a stream's position: %v", client.ErrNotReady, t.name, err)
	}
	return lo, hi, nil
}

// snapshot takes the compacted history: the view's entries at or after the
// start, in (partition, offset) order. The view's positions are read before
// its entries, so a record written meanwhile is either in the snapshot or
// after the positions the stream continues from.
func (s *Stream) snapshot(ctx context.Context) error {
	v, err := s.l.c.View(ctx, s.opts.Topic)
	if err != nil {
		return err
	}
	n := len(s.next)
	s.viewEnd = make([]int64, n)
	for p := range s.viewEnd {
		s.viewEnd[p] = max(v.Position(int32(p)), 0)
	}
	err = v.Scan(func(e views.Entry) bool {
		if int(e.Partition) < n && e.Offset >= s.next[e.Partition] && s.matchEntry(&e) {
			s.view = append(s.view, e)
		}
		return true
	})
	if err != nil { // a view on disk that cannot read: the stream would skip records
		return fmt.Errorf("%w: reading the view of %s for a stream's history: %v", client.ErrNotReady, s.opts.Topic, err)
	}
	slices.SortFunc(s.view, func(a, b views.Entry) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	s.phase = phaseView
	return nil
}

// Partitions is the number of partitions of the topic.
func (s *Stream) Partitions() int { return len(s.next) }

// Behind reports whether records the stream has not taken are already
// waiting: it is still reading history, or the tail holds more than the last
// Next returned. Called by the stream's own goroutine, as Next is.
func (s *Stream) Behind() bool {
	if s.phase != phaseRing {
		return true
	}
	s.r.mu.RLock()
	defer s.r.mu.RUnlock()
	return s.seq < s.r.head
}

// Lagged is closed once the stream fell more than its lag budget behind the
// tail (or out of the ring): it should end, and its client resume by id.
func (s *Stream) Lagged() <-chan struct{} { return s.cur.lagged }

// Retired is closed once the stream's topic gained partitions and its tail
// was retired: it should end with RetiredErr, and its client resume by id
// (on a fresh tail that reads every partition).
func (s *Stream) Retired() <-chan struct{} { return s.t.retired }

// RetiredErr is the *PartitionsChangedError (wrapping ErrPartitionsChanged)
// the stream ends with once Retired is closed; nil before.
func (s *Stream) RetiredErr() error {
	select {
	case <-s.t.retired:
		return s.retiredBy()
	default:
		return nil
	}
}

// retiredBy is the error the stream ends with once its tail is retired:
// the tail's, but for records removed above the tail's position, the gap
// as this stream has it — from its own position, which it resumes at with
// the removed partitions moved to their log start.
func (s *Stream) retiredBy() error {
	var gap *GapError
	if !errors.As(s.t.retiredErr, &gap) || gap.Cause != Truncated {
		return s.t.retiredErr
	}
	start := make(map[int32]int64, len(s.next))
	for p, off := range s.next {
		if off >= 0 {
			start[int32(p)] = off
		}
	}
	lo := make(map[int32]int64, len(gap.Gaps))
	for _, g := range gap.Gaps {
		lo[g.Partition] = g.LogStart
	}
	if own := truncatedGap(gap.Topic, start, lo); own != nil {
		return own
	}
	// Not expected: a stream of the tail reads at or below its position.
	return &GapError{Topic: gap.Topic, Cause: Truncated, Gaps: gap.Gaps, Resume: start}
}

// Close releases what the stream holds.
func (s *Stream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.phase == phaseRing {
		s.r.unregister(s.cur)
	}
	s.putBuf()
	s.l.release(s.t)
}

// Peek prepares the first chunk from what is available now (history, or
// records already in the ring) without waiting for new records, and returns
// the headers of its first record (nil when there is none). The chunk is
// what the next Next returns.
func (s *Stream) Peek(ctx context.Context) ([]client.Header, error) {
	// A tail that just started reads its backfill: that is history too.
	wctx, cancel := context.WithTimeout(ctx, s.l.opts.KafkaTimeout)
	select {
	case <-s.r.caughtUp:
	case <-wctx.Done():
	case <-s.l.ctx.Done():
	case <-s.t.retired: // fill ends the stream
	}
	cancel()
	chunk, err := s.fill(ctx, false)
	if err != nil {
		return nil, err
	}
	s.pending, s.peeked = chunk, true
	return s.first, nil
}

// Next returns the next frames to send, waiting for records when the stream
// is at the tail: one or more complete frames, valid until the next call.
// It fails with ErrLagged, ErrClosed, RetiredErr (ErrPartitionsChanged, a
// *GapError Recreated, or ErrUnknownTopic for a deleted topic), a *GapError
// Truncated (records removed from under a history read), ErrNotReady (a
// history read made no progress within the Kafka timeout) or ctx's error.
func (s *Stream) Next(ctx context.Context) ([]byte, error) {
	if s.peeked {
		s.peeked = false
		if len(s.pending) > 0 {
			p := s.pending
			s.pending = nil
			return p, nil
		}
	}
	return s.fill(ctx, true)
}

func (s *Stream) size() int { return len(s.run) + len(s.buf) }

func (s *Stream) full() bool { return s.size() >= s.l.opts.BatchBytes }

func (s *Stream) out() []byte {
	if len(s.run) > 0 {
		return s.run
	}
	return s.buf
}

func (s *Stream) getBuf() {
	if s.bufp == nil {
		s.bufp = s.l.bufs.Get().(*[]byte)
		s.buf = (*s.bufp)[:0]
	}
}

func (s *Stream) putBuf() {
	if s.bufp != nil {
		*s.bufp = s.buf[:0]
		s.l.bufs.Put(s.bufp)
		s.bufp, s.buf = nil, nil
	}
}

// addShared adds a frame of the ring: extending the run of contiguous frames
// when it can, copying otherwise.
func (s *Stream) addShared(f []byte) {
	switch {
	case len(s.buf) > 0:
		s.buf = append(s.buf, f...)
	case len(s.run) == 0:
		s.run = f
	case contiguous(s.run, f):
		s.run = s.run[:len(s.run)+len(f)]
	default:
		s.getBuf()
		s.buf = append(append(s.buf, s.run...), f...)
		s.run = nil
	}
}

// addValue encodes a frame for the stream's own position.
func (s *Stream) addValue(value []byte) {
	s.getBuf()
	if len(s.run) > 0 {
		s.buf = append(s.buf, s.run...)
		s.run = nil
	}
	s.buf = s.opts.Framer.AppendFrame(s.buf, value, s.next)
}

// addTombstone frames a tombstone for the stream's own position, when its
// framer frames tombstones; otherwise the tombstone is left out.
func (s *Stream) addTombstone(key []byte) {
	tf, ok := s.opts.Framer.(TombstoneFramer)
	if !ok {
		return
	}
	s.getBuf()
	if len(s.run) > 0 {
		s.buf = append(s.buf, s.run...)
		s.run = nil
	}
	s.buf = tf.AppendTombstone(s.buf, key, s.next)
}

func (s *Stream) noteFirst(hs []client.Header) {
	if !s.gotHdr {
		s.gotHdr = true
		s.first = hs
	}
}

// fill gathers the next chunk. With wait, it blocks until there is one.
func (s *Stream) fill(ctx context.Context, wait bool) ([]byte, error) {
	s.run = nil
	if s.bufp != nil {
		s.buf = s.buf[:0]
	}
	for {
		if s.closed {
			return nil, ErrClosed
		}
		if err := s.RetiredErr(); err != nil {
			// The retired tail reads none of the new partitions: the
			// stream ends here and resumes by id on a fresh tail.
			return nil, err
		}
		if s.later != nil {
			return nil, s.later
		}
		var out []byte
		var ret bool
		var err error
		switch s.phase {
		case phaseView:
			out, ret = s.viewStep()
		case phaseHistory:
			out, ret, err = s.historyStep(ctx)
		case phaseRing:
			out, ret, err = s.ringStep(ctx, wait)
		}
		if ret || err != nil {
			return out, err
		}
	}
}

// viewStep sends from a compacted topic's view; once it is all sent, the
// stream goes on with the history. ret: return out.
func (s *Stream) viewStep() (out []byte, ret bool) {
	s.fillView()
	if len(s.view) > 0 {
		return s.out(), true // full
	}
	for p, end := range s.viewEnd {
		s.next[p] = max(s.next[p], end)
	}
	s.view, s.viewEnd = nil, nil
	s.phase = phaseHistory
	return nil, false
}

// historyStep joins the ring if it holds the stream's position, else reads
// history from Kafka. ret: return out.
func (s *Stream) historyStep(ctx context.Context) (out []byte, ret bool, err error) {
	if pos, ok := s.r.register(s.cur, s.next); ok {
		s.join(pos)
		return nil, false, nil
	}
	if s.size() > 0 {
		return s.out(), true, nil // send what we have before reading more
	}
	if err := s.readHistory(ctx); err != nil {
		return nil, true, err
	}
	if s.size() > 0 && (s.full() || s.later != nil) {
		return s.out(), true, nil
	}
	return nil, false, nil
}

// ringStep sends from the ring, waiting (if wait) for records when there
// are none. ret: return out (nil when there was nothing and no wait).
func (s *Stream) ringStep(ctx context.Context, wait bool) (out []byte, ret bool, err error) {
	notify, err := s.fillRing(ctx)
	if err != nil {
		return nil, true, err
	}
	if s.size() > 0 {
		return s.out(), true, nil
	}
	if notify == nil {
		return nil, false, nil // the batch was all filtered out; more is there
	}
	if !wait {
		return nil, true, nil
	}
	s.putBuf() // an idle stream holds no buffer
	select {
	case <-notify:
		return nil, false, nil
	case <-s.cur.lagged:
		return nil, true, ErrLagged
	case <-s.t.retired:
		return nil, true, s.retiredBy()
	case <-ctx.Done():
		return nil, true, ctx.Err()
	case <-s.l.ctx.Done():
		return nil, true, ErrClosed
	}
}

func (s *Stream) fillView() {
	for len(s.view) > 0 && !s.full() {
		e := s.view[0]
		s.view[0] = views.Entry{} // the stream holds no chunk of the view once sent
		s.view = s.view[1:]
		s.next[e.Partition] = e.Offset + 1
		if !s.gotHdr {
			var hs []client.Header
			e.EachHeader(func(name string, value []byte) bool {
				hs = append(hs, client.Header{Key: name, Value: value})
				return true
			})
			s.noteFirst(hs)
		}
		s.addValue(e.Value)
	}
}

// join switches to the ring at its oldest entry, whose preceding positions
// are pos.
func (s *Stream) join(pos []int64) {
	s.phase = phaseRing
	s.seq = s.cur.seq.Load()
	s.ringPos = pos
	s.diff = 0
	for p := range pos {
		if pos[p] != s.next[p] {
			s.diff++
		}
	}
	s.aligned = s.diff == 0
}

// fillRing reads ring entries into the chunk. It returns the channel to wait
// on when the stream reached the head with nothing gathered.
func (s *Stream) fillRing(ctx context.Context) (<-chan struct{}, error) {
	select {
	case <-s.cur.lagged:
		return nil, ErrLagged
	default:
	}
	r := s.r
	r.mu.RLock()
	if s.seq < r.head-uint64(r.count) {
		r.mu.RUnlock()
		return nil, ErrLagged
	}
	off := s.opts.Framer.ValueOffset()
	for s.seq < r.head && !s.full() {
		e := r.at(s.seq)
		var value []byte // a held value, decoded by this stream
		decoded, skip := false, false
		if e.held != nil && e.offset >= s.next[e.partition] && s.matchRing(e) {
			if s.size() > 0 {
				break // send what is gathered first: the decode may fail
			}
			var err error
			if value, skip, err = s.decodeHeld(ctx, e); err != nil {
				return nil, err // the lock is released
			}
			if s.seq < r.head-uint64(r.count) {
				r.mu.RUnlock()
				return nil, ErrLagged
			}
			e, decoded = r.at(s.seq), !skip
		}
		s.seq++
		if !s.advance(e) || skip || !s.matchRing(e) {
			continue
		}
		switch {
		case e.vlen == vlenTombstone:
			s.addTombstone(e.key)
		case e.vlen >= 0:
			s.addEntry(e, value, decoded, off)
		}
	}
	var notify <-chan struct{}
	if s.seq == r.head {
		notify = r.notify
	}
	r.mu.RUnlock()
	s.cur.seq.Store(s.seq)
	return notify, nil
}

// advance moves the stream's positions past ring entry e, and tells
// whether e is one the stream has not dispatched yet. While the stream is
// not aligned with the ring (its positions differ from the ring's in diff
// partitions), both are kept; once they agree in every partition the
// stream sends the ring's shared frames.
func (s *Stream) advance(e *ringEntry) (dispatch bool) {
	p := e.partition
	dispatch = e.offset >= s.next[p]
	if s.aligned {
		if dispatch {
			s.next[p] = e.offset + 1
		}
		return dispatch
	}
	was := s.next[p] == s.ringPos[p]
	s.ringPos[p] = e.offset + 1
	if dispatch {
		s.next[p] = e.offset + 1
	}
	switch is := s.next[p] == s.ringPos[p]; {
	case was && !is:
		s.diff++
	case !was && is:
		s.diff--
	}
	if s.diff == 0 {
		s.aligned, s.ringPos = true, nil
	}
	return dispatch
}

// addEntry adds ring entry e to the chunk: value when this stream decoded
// it, else the ring's shared frame when the stream is aligned with the ring
// and may send it, else the value within the frame (at off).
func (s *Stream) addEntry(e *ringEntry, value []byte, decoded bool, off int) {
	if !s.gotHdr {
		s.noteFirst(kafkaHeaders(e.headers))
	}
	switch {
	case decoded:
		s.addValue(value)
	case s.aligned && s.shared:
		s.addShared(e.frame)
	default:
		s.addValue(e.frame[off : off+int(e.vlen)])
	}
}

// decodeHeld decodes a held ring entry for this stream, with the ring's
// read lock released meanwhile (a registry lookup may wait): the entry is
// immutable, and the caller checks the ring still holds it. On an error the
// lock stays released: the stream ends before the entry (ErrLater), to
// resume at it.
func (s *Stream) decodeHeld(ctx context.Context, e *ringEntry) (value []byte, skip bool, err error) {
	rec := &client.Record{Topic: s.opts.Topic, Partition: e.partition, Offset: e.offset, Key: e.key, Value: e.held}
	s.r.mu.RUnlock()
	v, err := s.t.decode(ctx, rec)
	if errors.Is(err, views.ErrLater) {
		return nil, false, err
	}
	s.r.mu.RLock()
	return v, err != nil, nil
}

func kafkaHeaders(hs []kafka.Header) []client.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]client.Header, len(hs))
	for i, h := range hs {
		out[i] = client.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

// readHistory reads one batch of the log between the stream's position and
// the ring's start with a leased reader.
func (s *Stream) readHistory(ctx context.Context) error {
	h := &historyRead{s: s, ctx: ctx, targets: s.r.starts()}
	h.done = make([]bool, len(h.targets))
	var parts []kafka.TopicPartition
	for p := range h.targets {
		if s.next[p] >= h.targets[p] {
			h.done[p] = true
			continue
		}
		h.remaining++
		parts = append(parts, kafka.TopicPartition{Topic: &s.opts.Topic, Partition: int32(p), Offset: kafka.Offset(s.next[p])})
	}
	if h.remaining == 0 {
		return nil
	}
	rd, err := s.l.pool.lease(ctx)
	if err != nil {
		return err
	}
	defer s.l.pool.release(rd)
	if err := rd.cons.Assign(parts); err != nil {
		return fmt.Errorf("%w: assigning a history reader to %s: %v", client.ErrNotReady, s.opts.Topic, err)
	}
	idle := 0
	limit := int(s.l.opts.KafkaTimeout / (50 * time.Millisecond)) // polls without progress
	for h.remaining > 0 && !s.full() && s.later == nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.l.ctx.Err() != nil {
			return ErrClosed
		}
		switch ev := rd.cons.Poll(50).(type) {
		case *kafka.Message:
			if h.message(ev) {
				idle = 0
			}
		case kafka.PartitionEOF:
			if h.eof(ev) {
				idle = 0
			}
		case kafka.Error:
			if outOfRange(ev.Code()) {
				// Records were removed under the read: the positions are
				// checked against the log start, and the read starts over.
				return s.movedStart(h)
			}
			s.l.logger.Debug("history reader", "topic", s.opts.Topic, "err", ev)
		case nil:
			if idle++; idle > limit {
				return fmt.Errorf("%w: reading the history of %s made no progress within %v", client.ErrNotReady, s.opts.Topic, s.l.opts.KafkaTimeout)
			}
		}
	}
	return nil
}

// outOfRange reports whether a history reader's error says its offset is
// out of range: its reader never resets to another offset on its own.
func outOfRange(code kafka.ErrorCode) bool {
	return code == kafka.ErrAutoOffsetReset || code == kafka.ErrOffsetOutOfRange
}

// movedStart is what a history read does when its offset fell below the log
// start: the partitions the client did not name, still at the log start
// they began from, move to the new one; a position the client asked for or
// was sent is a gap (s.later: the stream ends with it once what it gathered
// is sent).
func (s *Stream) movedStart(h *historyRead) error {
	low, _, err := s.l.logBounds(h.ctx, s.t)
	if err != nil {
		return err
	}
	lo := map[int32]int64{}
	pos := map[int32]int64{}
	for p := range h.done {
		if h.done[p] || p >= len(low) {
			continue
		}
		if s.next[p] < low[p] && s.from[p] >= 0 && s.next[p] == s.from[p] {
			s.next[p], s.from[p] = low[p], low[p]
		}
		lo[int32(p)] = low[p]
	}
	for p, off := range s.next {
		pos[int32(p)] = off
	}
	if g := truncatedGap(s.opts.Topic, pos, lo); g != nil {
		s.later = g
	}
	return nil
}

// historyRead is the progress of one readHistory: per partition the offset
// where the ring takes over and whether it is reached.
type historyRead struct {
	s         *Stream
	ctx       context.Context // the stream's, for the decoder
	targets   []int64
	done      []bool
	remaining int
}

func (h *historyRead) finish(p int32) {
	if !h.done[p] {
		h.done[p] = true
		h.remaining--
		h.s.next[p] = max(h.s.next[p], h.targets[p])
	}
}

// message takes one record of the history; true if it was progress.
func (h *historyRead) message(ev *kafka.Message) bool {
	s := h.s
	tp := ev.TopicPartition
	p, off := tp.Partition, int64(tp.Offset)
	if tp.Error != nil || tp.Topic == nil || *tp.Topic != s.opts.Topic || p < 0 || int(p) >= len(h.done) || h.done[p] || off < s.next[p] {
		return false
	}
	if off >= h.targets[p] {
		h.finish(p) // the ring holds the rest
		return true
	}
	if ev.Value != nil && s.matchKafka(ev.Key, ev.Headers) {
		value, keep := ev.Value, true
		if s.t.decode != nil {
			v, err := s.t.decode(h.ctx, &client.Record{Topic: s.opts.Topic, Partition: p, Offset: off,
				Timestamp: ev.Timestamp, Key: ev.Key, Value: ev.Value})
			switch {
			case errors.Is(err, views.ErrLater):
				s.later = err // before the record: the stream resumes at it
				return true
			case err != nil:
				keep = false // left out
			default:
				value = v
			}
		}
		s.next[p] = off + 1
		if keep {
			if !s.gotHdr {
				s.noteFirst(kafkaHeaders(ev.Headers))
			}
			s.addValue(value)
		}
	} else {
		s.next[p] = off + 1
		if ev.Value == nil && s.matchKafka(ev.Key, ev.Headers) {
			s.addTombstone(ev.Key)
		}
	}
	if off+1 >= h.targets[p] {
		h.finish(p)
	}
	return true
}

// eof takes the end of a partition; true if it finished one.
func (h *historyRead) eof(ev kafka.PartitionEOF) bool {
	p := ev.Partition
	if ev.Topic != nil && *ev.Topic == h.s.opts.Topic && p >= 0 && int(p) < len(h.done) && int64(ev.Offset) >= h.targets[p] {
		h.finish(p)
		return true
	}
	return false
}

// Filters. A record matches when no filter is set or one filter matches:
// the key (when set) and the first value of every header are equal.

func (s *Stream) matchRing(e *ringEntry) bool { return s.matchKafka(e.key, e.headers) }

func (s *Stream) matchKafka(key []byte, hs []kafka.Header) bool {
	if len(s.opts.Filters) == 0 {
		return true
	}
	for i := range s.opts.Filters {
		f := &s.opts.Filters[i]
		if f.Key != nil && (key == nil || string(key) != *f.Key) {
			continue
		}
		ok := true
		for _, want := range f.Headers {
			v, found := kafkaHeader(hs, want.Key)
			if !found || string(v) != string(want.Value) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func kafkaHeader(hs []kafka.Header, name string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

func (s *Stream) matchEntry(e *views.Entry) bool {
	if len(s.opts.Filters) == 0 {
		return true
	}
	for i := range s.opts.Filters {
		f := &s.opts.Filters[i]
		if f.Key != nil && e.Key != *f.Key {
			continue
		}
		ok := true
		for _, want := range f.Headers {
			v, found := e.Header(want.Key)
			if !found || string(v) != string(want.Value) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
