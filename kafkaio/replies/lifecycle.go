package replies

import (
	"errors"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// A reply topic deleted, or deleted and created again, takes its replies
// with it. The follower reports such a topic (Gone, see
// follow/lifecycle.go) once it stopped reading it, and the index:
//   - turns every stored reply of the topic nobody waits for, and every
//     evicted one, into a removed location (store.dropTopic): a replay or
//     follow-up of it is told its reply is gone (Watch.Err, a
//     *RemovedError: its result expired), never answered from the deleted
//     generation, and never written again;
//   - leaves the ids with waiters as they are: each is a request in flight
//     whose reply the responder writes to the topic as it is now, and the
//     waiter takes it from there;
//   - reads the topic again from now - Retention as a topic added now, its
//     catch-up reset: until it has caught up (or while the topic does not
//     exist) WaitCaughtUp fails, and a request is answered not written.
//
// The readiness is left alone, as the views leave it for a deleted topic:
// the routes of that reply topic answer for themselves, and the others are
// served.

// gone is the follower's report that topic is no longer the generation it
// read.
func (x *Index) gone(topic string, why error) {
	x.mu.Lock()
	t := x.topics[topic]
	if t == nil || x.closed {
		x.mu.Unlock()
		return
	}
	dropped := x.store.dropTopic(t)
	t.started = false
	if t.caught {
		t.caught = false
		t.caughtUp = make(chan struct{})
	}
	x.wg.Add(1)
	x.mu.Unlock()
	x.logger.Warn("a reply topic was deleted or created again: its stored replies are answered as removed, and it is read again",
		"topic", topic, "replies", dropped, "reason", why)
	go x.restart(t)
}

// restart assigns a topic the follower dropped again, retrying every
// second until it works (a deleted topic may be created again), without
// touching the readiness.
func (x *Index) restart(t *replyTopic) {
	defer x.wg.Done()
	logged := false
	for {
		err := x.assign(t)
		x.mu.Lock()
		t.lastErr = err
		x.mu.Unlock()
		if err == nil || x.ctx.Err() != nil {
			return
		}
		if !logged {
			logged = true
			if errors.Is(err, client.ErrUnknownTopic) {
				x.logger.Warn("a reply topic was deleted: its requests are answered not written until it exists again", "topic", t.name)
			} else {
				x.logger.Warn("reading a reply topic again failed; retrying", "topic", t.name, "err", err)
			}
		}
		select {
		case <-x.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
