package follow

import (
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// A followed topic is one generation of it: the topic the follower found
// when it was assigned (its topic id, KIP-516). Operators delete topics and
// create them again under the same name; the follower notices, and never
// hands its owner records of two generations as one:
//   - deleted: the partition check finds the topic unknown;
//   - recreated: the partition check finds another topic id, or the
//     consumer reads a record (or an end of partition) below the position
//     of its partition: the log went back (the offset was out of range in
//     the new generation and reset to its start). That record is not
//     applied.
//
// Either way the follower stops reading the topic, wakes whoever waits for
// its positions (they find it no longer read), and tells its owner (Gone),
// which drops what it read and assigns the topic again: the new
// generation, read as a topic added now.

// ErrTopicDeleted is wrapped by the reason Gone is given for a topic that
// was deleted.
var ErrTopicDeleted = errors.New("the topic was deleted while the processor read it")

// ErrTopicRecreated is wrapped by the reason Gone is given for a topic that
// is another generation now.
var ErrTopicRecreated = errors.New("the topic was deleted and created again, or its log went back, while the processor read it")

// topicID describes topic for its id; zero when it cannot be had (the
// partition check then tells nothing of a recreation; the log going back
// still does).
func (f *Follower) topicID(topic string) [16]byte {
	states, err := Describe(f.ctx, f.describer(), []string{topic}, f.opts.KafkaTimeout)
	if err != nil {
		f.logger.Debug("describing a followed topic for its id failed", "topic", topic, "err", err)
	}
	return states[topic].ID
}

// idChanged reports whether a followed topic now has another id than the
// one it was assigned with (both known).
func (f *Follower) idChanged(topic string, id [16]byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	return t != nil && id != [16]byte{} && t.id != [16]byte{} && id != t.id
}

// admit tells whether a record (or an end of partition) at offset of
// partition p may be applied: its topic is followed, and the offset is not
// below the partition's position. A position going back means a new
// generation: the topic is dropped, and the record is not applied.
func (f *Follower) admit(topic string, p int32, offset int64) bool {
	f.mu.Lock()
	t := f.topics[topic]
	if t == nil || int(p) >= len(t.next) {
		f.mu.Unlock()
		return t != nil // a partition being added: progress ignores it
	}
	at := t.next[p]
	f.mu.Unlock()
	if offset >= at {
		return true
	}
	f.drop(topic, t, fmt.Errorf("%w: %s %s[%d] is at offset %d, below the %d read", ErrTopicRecreated, f.opts.TopicRole, topic, p, offset, at))
	return false
}

// drop stops reading a topic that is no longer the generation it was
// assigned (want, or whichever is followed when nil), wakes the waiters of
// its positions and tells the owner. A topic dropped or assigned again
// meanwhile is left alone.
func (f *Follower) drop(topic string, want *followed, why error) {
	f.assignMu.Lock()
	f.mu.Lock()
	t := f.topics[topic]
	if t == nil || (want != nil && t != want) {
		f.mu.Unlock()
		f.assignMu.Unlock()
		return
	}
	delete(f.topics, topic)
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
	n := len(t.next)
	f.mu.Unlock()
	parts := make([]kafka.TopicPartition, n)
	for p := range parts {
		parts[p] = kafka.TopicPartition{Topic: &topic, Partition: int32(p)}
	}
	err := f.cons.IncrementalUnassign(parts)
	f.assignMu.Unlock()
	if err != nil {
		f.logger.Warn("unassigning a "+f.opts.TopicRole+" that changed", "topic", topic, "err", err)
	}
	f.logger.Warn("a "+f.opts.TopicRole+" changed under its reader: what was read of it is dropped, and it is read again", "topic", topic, "reason", why)
	if f.opts.Gone != nil {
		f.opts.Gone(topic, why)
	}
}
