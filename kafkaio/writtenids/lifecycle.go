package writtenids

// A request topic deleted, or deleted and created again, takes its records
// with it: an id read from the deleted generation is no longer proof that
// the request is in the log. The follower reports such a topic (Gone, see
// follow/lifecycle.go) once it stopped reading it; the index forgets the
// topic and every id read from it, and the topic's next Sync reads the new
// generation back from its start, as a topic added now. A repeat of a
// request written to the deleted generation is then written again: the
// first copy is gone with its topic, so the log holds it once. A Sync under
// way when the topic is dropped fails (not ready: the request is answered
// not written, and its retry reads the new generation).
func (x *Index) gone(topic string, why error) {
	x.mu.Lock()
	t := x.topics[topic]
	if t == nil {
		x.mu.Unlock()
		return
	}
	delete(x.topics, topic)
	x.stats.Topics--
	dropped := x.dropTopicLocked(t)
	x.mu.Unlock()
	x.logger.Warn("a request topic was deleted or created again: the ids read from it are forgotten, and it is read again from its start at its next use",
		"topic", topic, "ids", dropped, "reason", why)
}

// dropTopicLocked removes t's ids from the first-read order; it returns
// how many there were.
func (x *Index) dropTopicLocked(t *keyTopic) int {
	live := x.fifo[x.head:]
	kept := live[:0]
	for _, e := range live {
		if e.topic != t {
			kept = append(kept, e)
		}
	}
	dropped := len(live) - len(kept)
	clear(live[len(kept):])
	n := copy(x.fifo, kept)
	clear(x.fifo[n:])
	x.fifo, x.head = x.fifo[:n], 0
	x.stats.Keys -= dropped
	clear(t.entries)
	return dropped
}
