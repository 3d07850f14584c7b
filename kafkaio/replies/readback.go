package replies

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/follow"
)

// replyRead is one read-back: the records of one evicted id, shared by
// every asker of the id. The reader fills found or err, then hands it to
// Index.readBackDone.
type replyRead struct {
	topic    string
	id       string
	headers  []string // the topic's correlation header names
	spans    []replySpan
	started  time.Time
	deadline time.Time // started + the Kafka timeout
	found    []*client.Record
	err      error
}

// replyReader reads evicted replies back for one reply index, in one
// goroutine with one consumer of its own: assignment only (no group is
// joined, nothing is committed), read_committed like the index's consumer,
// so it reads exactly what the index had read. Both are created with the
// first read-back: an index that never evicts an asked-for id has neither.
//
// Reads under way share the consumer: a partition is assigned at the
// lowest offset any of them wants, read forward only until each of them
// has its records, then unassigned.
type replyReader struct {
	x    *Index
	mu   sync.Mutex
	in   []*replyRead // asked for, not admitted yet
	wake chan struct{}

	// The goroutine's own.
	cons     *kafka.Consumer
	stopLogs chan struct{}
	parts    map[readKey]*readPart
	active   []*readState

	admitted atomic.Int64 // reads started, read by tests from their goroutine
}

type readKey struct {
	topic     string
	partition int32
}

// readPart is an assigned partition and the spans read from it.
type readPart struct {
	spans []*spanRead
	// pos is the offset the partition was last assigned at, or past the
	// newest record read from it since: where the consumer reads next.
	pos int64
}

// readBackGap is how many records a partition's read may pass over to
// reach its next span. Replays ask for replies spread over the whole
// topic: read forward from the lowest span, every read would wait for a
// scan of everything written between its reply and the one before, and
// under a steady mix of replays those scans outgrow the Kafka timeout. A
// gap wider than this is jumped instead, with one assignment (a fetch
// round trip) at the next span's offset.
const readBackGap = 64

// readState is an admitted read and its spans.
type readState struct {
	rd    *replyRead
	spans []*spanRead
}

// spanRead is the progress through one span: records before next were
// seen (a partition assigned again for another read re-reads them).
type spanRead struct {
	rd   *replyRead
	span replySpan
	next int64
	got  []*client.Record
	done bool
}

// reader returns the index's reader, starting it on first use. Call with
// x.mu held and the index not closed.
func (x *Index) reader() *replyReader {
	if x.rdr == nil {
		x.rdr = &replyReader{x: x, wake: make(chan struct{}, 1), parts: map[readKey]*readPart{}}
		x.wg.Add(1)
		go x.rdr.run()
	}
	return x.rdr
}

func (rr *replyReader) enqueue(rd *replyRead) {
	rr.mu.Lock()
	rr.in = append(rr.in, rd)
	rr.mu.Unlock()
	select {
	case rr.wake <- struct{}{}:
	default:
	}
}

func (rr *replyReader) take() []*replyRead {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	in := rr.in
	rr.in = nil
	return in
}

// run admits reads as they are asked for and polls while any is under way.
// A read still under way when the index closes is left: the index's
// waiters are not woken at Close.
func (rr *replyReader) run() {
	defer rr.x.wg.Done()
	defer rr.close()
	ctx := rr.x.ctx
	for ctx.Err() == nil {
		if len(rr.active) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-rr.wake:
			}
		}
		if rr.x.beforeAdmit != nil {
			rr.x.beforeAdmit()
		}
		in := rr.take()
		rr.admitted.Add(int64(len(in)))
		for _, rd := range in {
			rr.admit(rd)
		}
		if len(rr.active) > 0 {
			rr.poll()
			rr.finish()
		}
	}
}

func (rr *replyReader) close() {
	if rr.cons == nil {
		return
	}
	_ = rr.cons.Close()
	close(rr.stopLogs)
}

// consumer creates the reader's consumer once.
func (rr *replyReader) consumer() (*kafka.Consumer, error) {
	if rr.cons != nil {
		return rr.cons, nil
	}
	o := rr.x.opts
	// Its settings (few records prefetched, no fetch held at a partition's
	// end) are client.ReplyReadBackConfig's, with their reasons.
	cm := client.ReplyReadBackConfig(o.Properties, o.KafkaTimeout, "kafka-ext-proc-reply-reads-"+uuid.NewString())
	cons, err := kafka.NewConsumer(cm)
	if err != nil {
		return nil, fmt.Errorf("%w: creating the reply read-back consumer of kafka binding %q: %v", client.ErrNotReady, o.Name, err)
	}
	rr.cons, rr.stopLogs = cons, make(chan struct{})
	rr.x.wg.Add(1)
	go func() {
		defer rr.x.wg.Done()
		client.ForwardLogs(rr.x.logger, cons.Logs(), "reply-reads", rr.stopLogs)
	}()
	return cons, nil
}

// admit starts a read: each of its spans joins the reads of its
// partition.
func (rr *replyReader) admit(rd *replyRead) {
	cons, err := rr.consumer()
	if err != nil {
		rd.err = err
		rr.x.readBackDone(rd)
		return
	}
	st := &readState{rd: rd}
	for _, s := range rd.spans {
		sp := &spanRead{rd: rd, span: s, next: s.first}
		st.spans = append(st.spans, sp)
		if err := rr.place(cons, sp); err != nil {
			sp.done = true
			rd.err = err
		}
	}
	rr.active = append(rr.active, st)
}

// place adds a span to its partition's reads, assigning the partition at
// the span's first offset unless it is read from at or below it already.
func (rr *replyReader) place(cons *kafka.Consumer, sp *spanRead) error {
	topic, s := sp.rd.topic, sp.span
	key := readKey{topic, s.partition}
	p := rr.parts[key]
	if p != nil && !rewinds(p, s.first) {
		p.spans = append(p.spans, sp)
		return nil
	}
	if p != nil {
		// Read past the span: assigned again at its offset; the spans
		// already under way skip what they saw.
		rr.unassign(key)
	}
	tp := kafka.TopicPartition{Topic: &topic, Partition: s.partition, Offset: kafka.Offset(s.first)}
	if err := cons.IncrementalAssign([]kafka.TopicPartition{tp}); err != nil {
		err = fmt.Errorf("%w: assigning %s[%d] to read an evicted reply back: %v", client.ErrNotReady, topic, s.partition, err)
		if p != nil {
			for _, other := range p.spans { // unassigned: their reads fail too
				other.done = true
				if other.rd.err == nil {
					other.rd.err = err
				}
			}
		}
		return err
	}
	if p == nil {
		p = &readPart{}
		rr.parts[key] = p
	}
	p.pos = s.first
	p.spans = append(p.spans, sp)
	return nil
}

// rewinds tells whether a partition being read must be read again from
// offset: some span of it is past it, or it is not assigned.
func rewinds(p *readPart, offset int64) bool {
	for _, sp := range p.spans {
		if !sp.done && sp.next <= offset {
			return false // reading from at or below offset still
		}
	}
	return true
}

func (rr *replyReader) unassign(key readKey) {
	topic := key.topic
	if err := rr.cons.IncrementalUnassign([]kafka.TopicPartition{{Topic: &topic, Partition: key.partition}}); err != nil {
		rr.x.logger.Debug("unassigning a reply read-back partition", "topic", topic, "partition", key.partition, "err", err)
	}
}

// poll reads one event and gives it to the spans of its partition. It
// waits 10 ms at most, so a read asked for meanwhile is admitted soon.
func (rr *replyReader) poll() {
	switch ev := rr.cons.Poll(10).(type) {
	case *kafka.Message:
		tp := ev.TopicPartition
		if tp.Error != nil || tp.Topic == nil {
			return
		}
		p := rr.parts[readKey{*tp.Topic, tp.Partition}]
		if p == nil {
			return
		}
		for _, sp := range p.spans {
			sp.observe(ev, rr.x.now)
		}
		rr.skipGap(readKey{*tp.Topic, tp.Partition}, p, int64(tp.Offset))
	case kafka.PartitionEOF:
		// Everything below the partition's end was read: what a span has
		// not found is not there.
		if ev.Topic == nil {
			return
		}
		if p := rr.parts[readKey{*ev.Topic, ev.Partition}]; p != nil {
			for _, sp := range p.spans {
				sp.done = true
			}
		}
	case kafka.Error:
		rr.x.logger.Debug("reply read-back consumer", "err", ev)
	}
}

// skipGap moves a partition's read to its next span when that span lies
// more than readBackGap records past the record just read at off (see
// readBackGap). Records from before the last assignment move nothing.
func (rr *replyReader) skipGap(key readKey, p *readPart, off int64) {
	if off < p.pos {
		return
	}
	p.pos = off + 1
	next := int64(-1)
	for _, sp := range p.spans {
		if !sp.done && (next < 0 || sp.next < next) {
			next = sp.next
		}
	}
	if next < 0 || next-p.pos <= readBackGap {
		return
	}
	rr.unassign(key)
	topic := key.topic
	tp := kafka.TopicPartition{Topic: &topic, Partition: key.partition, Offset: kafka.Offset(next)}
	if err := rr.cons.IncrementalAssign([]kafka.TopicPartition{tp}); err != nil {
		err = fmt.Errorf("%w: assigning %s[%d] to read an evicted reply back: %v", client.ErrNotReady, topic, key.partition, err)
		for _, sp := range p.spans { // unassigned: their reads fail
			if !sp.done {
				sp.done = true
				if sp.rd.err == nil {
					sp.rd.err = err
				}
			}
		}
		return
	}
	p.pos = next
}

// observe takes a record of the span's partition.
func (sp *spanRead) observe(m *kafka.Message, now func() time.Time) {
	off := int64(m.TopicPartition.Offset)
	if sp.done || off < sp.next {
		return
	}
	sp.next = off + 1
	if off > sp.span.last {
		sp.done = true
		return
	}
	if carriesID(m.Headers, sp.rd.headers, sp.rd.id) {
		sp.got = append(sp.got, toReplyRecord(sp.rd.topic, m, now))
	}
	if off == sp.span.last || len(sp.got) >= int(sp.span.count) {
		sp.done = true
	}
}

// carriesID tells whether one of the correlation headers carries id.
func carriesID(hs []kafka.Header, names []string, id string) bool {
	found := false
	follow.EachID(hs, names, func(v []byte) { found = found || string(v) == id })
	return found
}

// finish hands back the reads whose spans are done or whose time is up,
// and unassigns the partitions no read needs any more.
func (rr *replyReader) finish() {
	now := time.Now()
	kept := rr.active[:0]
	for _, st := range rr.active {
		switch {
		case st.done():
			rr.complete(st)
		case now.After(st.rd.deadline):
			st.rd.err = fmt.Errorf("%w: the evicted reply of correlation id %s was not read back from topic %s within the Kafka timeout (%v)",
				client.ErrNotReady, st.rd.id, st.rd.topic, rr.x.opts.KafkaTimeout)
			for _, sp := range st.spans {
				sp.done = true
			}
			rr.x.readBackDone(st.rd)
		default:
			kept = append(kept, st)
			continue
		}
	}
	clear(rr.active[len(kept):])
	rr.active = kept
	for key, p := range rr.parts {
		live := p.spans[:0]
		for _, sp := range p.spans {
			if !sp.done {
				live = append(live, sp)
			}
		}
		clear(p.spans[len(live):])
		p.spans = live
		if len(live) == 0 {
			rr.unassign(key)
			delete(rr.parts, key)
		}
	}
}

func (st *readState) done() bool {
	for _, sp := range st.spans {
		if !sp.done {
			return false
		}
	}
	return true
}

// complete hands back a read whose spans are done: the records found, or
// a *RemovedError when the id's first record was not found.
func (rr *replyReader) complete(st *readState) {
	rd := st.rd
	if rd.err == nil {
		for _, sp := range st.spans {
			rd.found = append(rd.found, sp.got...)
		}
		if first := st.spans[0]; len(first.got) == 0 || first.got[0].Offset != first.span.first {
			rd.found = nil
			rd.err = rr.removed(rd, first.span)
		}
	}
	rr.x.readBackDone(rd)
}

// removed describes a reply its topic no longer holds, with the
// partition's first offset if Kafka tells it in time.
func (rr *replyReader) removed(rd *replyRead, s replySpan) error {
	e := &RemovedError{Topic: rd.topic, Partition: s.partition, Offset: s.first, LogStart: -1}
	wait := max(time.Until(rd.deadline), 100*time.Millisecond)
	if lo, _, err := rr.cons.QueryWatermarkOffsets(rd.topic, s.partition, int(wait/time.Millisecond)); err == nil {
		e.LogStart = lo
	}
	return e
}
