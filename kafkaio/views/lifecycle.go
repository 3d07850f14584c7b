package views

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/follow"
)

// A view shows one generation of its topic: the records of the topic it
// described when it opened (its topic id). Operators delete topics, and
// create them again under the same name; a view notices, and never merges
// two generations:
//   - deleted: the topic check (every PartitionCheck, and at once when the
//     live consumer reports a topic error) finds the topic unknown. The view
//     is dropped; the topic's next holder opens it anew, which fails as for
//     any missing topic, wrapping ErrTopicDeleted so the answer says why.
//   - recreated: the topic check finds another topic id, or the live
//     consumer reads a record (or an end of partition) below the view's
//     position (the log went back: the consumer's offset was out of range
//     in the new generation and reset to its start). The view is dropped
//     before it applies anything of the new generation, and the next holder
//     opens a view of the new one, caught up from its start, with the new
//     topic id in its entity tags.
// Either way the dropped view's waiters are woken at once (View.Gone).
//   - truncated: records removed below the view's position (DeleteRecords,
//     or the retention of a topic both compacted and deleted) are no longer
//     in the log, and the view no longer shows them: the topic check reads
//     every partition's log start and removes the entries below it (the
//     rest of the view is still the log's latest record per key, so it is
//     not rebuilt; a topic whose retention moves its log start often would
//     otherwise be read again and again). The answers and their entity tags
//     change with it, and its waiters are woken.
// A warmed view is opened again at once, pinned, and its topic looked up
// every second while it does not exist, so a recreated topic's view is
// caught up before its next request. The readiness is left alone: the
// routes of a deleted topic answer for themselves, and taking every replica
// out of service for one topic would stop the other routes too.

// ErrTopicDeleted is wrapped, with client.ErrUnknownTopic, by the error of
// opening a view of a topic that was deleted while a view of it was read.
var ErrTopicDeleted = errors.New("the topic was deleted while the processor read it")

// ErrTopicRecreated is the reason of a view dropped because its topic is
// another generation now.
var ErrTopicRecreated = errors.New("the topic was deleted and created again, or its log went back, while the processor read it")

// maxDeleted bounds the deleted topics remembered for the reason of their
// answers (templated routes may name many).
const maxDeleted = 1024

// triggerCheck asks for a topic check now, as a live-consumer error may
// mean a topic was deleted or recreated.
func (c *Views) triggerCheck() {
	select {
	case c.recheck <- struct{}{}:
	default: // one is asked for already
	}
}

// topicError reports whether a consumer error may mean a topic the views
// read was deleted or recreated.
func topicError(code kafka.ErrorCode) bool {
	switch code {
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic, kafka.ErrUnknownTopicID,
		kafka.ErrOffsetOutOfRange, kafka.ErrAutoOffsetReset:
		return true
	}
	return false
}

// minTriggeredGap is the least time between two topic checks asked for by
// consumer errors: a cluster that keeps reporting errors (a broker down) is
// not described in a loop.
const minTriggeredGap = time.Second

// followTopics runs while the client lives: every PartitionCheck, and when
// a consumer error asks for it, it describes the topics of the ready views,
// follows partitions added to them and drops the views of topics deleted or
// recreated.
func (c *Views) followTopics() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.PartitionCheck)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.recheck:
			if wait := minTriggeredGap - time.Since(last); wait > 0 {
				select {
				case <-c.ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		last = time.Now()
		if err := c.checkTopics(); err != nil && c.ctx.Err() == nil {
			c.logger.Debug("checking the views' topics failed; retrying at the next check", "err", err)
		}
	}
}

// checkTopics describes the topics of the ready views in one request.
func (c *Views) checkTopics() error {
	c.mu.RLock()
	ready := map[string]*View{}
	var names []string
	for topic, s := range c.views {
		// A view still catching up reads the partitions it was created
		// with; the next check grows it once it is handed over.
		if s.view != nil && s.view.isReady() {
			ready[topic] = s.view
			names = append(names, topic)
		}
	}
	c.mu.RUnlock()
	states, err := follow.Describe(c.ctx, c.admin, names, c.opts.KafkaTimeout)
	var kept []*View
	for topic, st := range states {
		v := ready[topic]
		switch {
		case v == nil:
		case st.Unknown:
			c.drop(topic, v, fmt.Errorf("%w: %s", ErrTopicDeleted, topic))
		case st.ID != [16]byte{} && v.TopicID() != [16]byte{} && st.ID != v.TopicID():
			c.drop(topic, v, fmt.Errorf("%w: %s has another topic id", ErrTopicRecreated, topic))
		default:
			c.grow(topic, st.Partitions)
			kept = append(kept, v)
		}
	}
	return errors.Join(err, c.dropRemoved(kept))
}

// dropRemoved reads the log start of every partition of the views in one
// request and removes from each view the entries the log no longer holds.
func (c *Views) dropRemoved(vs []*View) error {
	if len(vs) == 0 {
		return nil
	}
	req := map[kafka.TopicPartition]kafka.OffsetSpec{}
	for _, v := range vs {
		topic := v.Topic()
		for p := range v.Partitions() {
			req[kafka.TopicPartition{Topic: &topic, Partition: int32(p)}] = kafka.EarliestOffsetSpec
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.KafkaTimeout)
	defer cancel()
	res, err := c.admin.ListOffsets(ctx, req, kafka.SetAdminRequestTimeout(c.opts.KafkaTimeout))
	if err != nil {
		return fmt.Errorf("reading the log starts of %d views' topics: %w", len(vs), err)
	}
	starts := map[string][]int64{}
	for tp, r := range res.ResultInfos {
		if tp.Topic == nil || r.Error.Code() != kafka.ErrNoError {
			continue // that partition is looked at again at the next check
		}
		lo := starts[*tp.Topic]
		for int(tp.Partition) >= len(lo) {
			lo = append(lo, 0)
		}
		lo[tp.Partition] = int64(r.Offset)
		starts[*tp.Topic] = lo
	}
	for _, v := range vs {
		n := v.dropBelow(starts[v.Topic()])
		if err := v.storeErr(); err != nil {
			c.storeFailed(v, err)
			continue
		}
		if n > 0 {
			c.logger.Info("records were removed from a view's topic below the view's position (DeleteRecords or retention): the view no longer shows them",
				"topic", v.Topic(), "keys", n)
		}
	}
	return nil
}

// dropBelow removes the entries (and records held for conversion) whose
// offset is below their partition's log start lo[p], wakes their waiters
// and the view's, and returns how many entries it removed.
func (v *View) dropBelow(lo []int64) int {
	below := func(p int32, offset int64) bool { return int(p) < len(lo) && offset < lo[p] }
	v.mu.Lock()
	defer v.mu.Unlock()
	// Every record applied since the last look was in the log, so at or
	// above the log start seen then: only a log start that moved can
	// leave entries below it (a view on disk is not read through every
	// check).
	moved := false
	for p, start := range lo {
		if p < len(v.starts) && start <= v.starts[p] {
			continue
		}
		moved = moved || start > 0
		for p >= len(v.starts) {
			v.starts = append(v.starts, 0)
		}
		v.starts[p] = start
	}
	if !moved {
		return 0
	}
	var keys []string
	collect := func(e Entry) bool {
		if below(e.Partition, e.Offset) {
			keys = append(keys, e.Key)
		}
		return true
	}
	if v.disk == nil {
		v.entries.scan(collect)
	} else if err := v.disk.scan(collect); err != nil {
		v.disk.fail(err) // dropRemoved drops the view
		return 0
	}
	for key, r := range v.held {
		if below(r.Partition, r.Offset) {
			delete(v.held, key)
			v.unheldLocked(r)
		}
	}
	s := &v.entries
	for _, key := range keys {
		k := []byte(key)
		if v.disk != nil {
			v.disk.remove(key)
		} else if slot, num, ok := s.find(k, s.hash(k)); ok {
			s.remove(slot, num)
		}
		if w, ok := v.keyWaits[key]; ok {
			close(w.ch)
			delete(v.keyWaits, key)
		}
	}
	if len(keys) > 0 {
		v.version++
		if v.anyTimer == nil {
			v.anyTimer = time.AfterFunc(v.window, v.fireChanged)
		}
	}
	return len(keys)
}

// drop takes a view that no longer shows its topic out of the client: it is
// never held again, its partitions are no longer read, its waiters are
// woken, and the topic's next holder opens a new view. A view dropped
// already, or replaced meanwhile, is left alone.
func (c *Views) drop(topic string, v *View, reason error) {
	c.mu.Lock()
	s, ok := c.views[topic]
	if !ok || s.view != v {
		c.mu.Unlock()
		return
	}
	delete(c.views, topic)
	if h := c.handles[topic]; h != nil {
		h.view.CompareAndSwap(v, nil)
	}
	if errors.Is(reason, ErrTopicDeleted) {
		if len(c.deleted) >= maxDeleted {
			clear(c.deleted)
		}
		c.deleted[topic] = true
	}
	c.mu.Unlock()
	v.invalidate(reason)
	c.unassign(topic, v.Partitions())
	c.logger.Warn("a view's topic changed under it; the view is dropped and its waiters woken", "topic", topic, "reason", reason)
	if s.pinned {
		name := ""
		if errors.Is(reason, ErrStoreFailed) {
			// Not the topic's doing: every replica's routes of the topic
			// would fail alike, so the readiness says why until it is
			// caught up again.
			name = c.viewCondition(topic)
			if c.opts.Readiness != nil {
				c.opts.Readiness.Set(name, false, reason.Error())
			}
		}
		c.keepOpening(topic, name)
	}
}

// unassign stops the live consumer reading a topic's first n partitions.
func (c *Views) unassign(topic string, n int) {
	parts := make([]kafka.TopicPartition, n)
	for p := range parts {
		parts[p] = kafka.TopicPartition{Topic: &topic, Partition: int32(p)}
	}
	c.assignMu.Lock()
	err := c.live.IncrementalUnassign(parts)
	c.assignMu.Unlock()
	if err != nil {
		c.logger.Warn("unassigning a view's partitions", "topic", topic, "err", err)
	}
}

// wentBack drops the view of topic whose log went back under the live
// consumer (a record or an end of partition below the view's position).
func (c *Views) wentBack(v *View, p int32, offset int64) {
	c.drop(v.Topic(), v, fmt.Errorf("%w: %s[%d] is at offset %d, below the %d the view had read",
		ErrTopicRecreated, v.Topic(), p, offset, v.Position(p)))
}

// deletedErr is the error of opening a view of topic that does not exist:
// err, and ErrTopicDeleted when a view of it was dropped for its deletion.
func (c *Views) deletedErr(topic string, err error) error {
	c.mu.RLock()
	deleted := c.deleted[topic]
	c.mu.RUnlock()
	if deleted {
		return fmt.Errorf("%w (%w)", err, ErrTopicDeleted)
	}
	return err
}
