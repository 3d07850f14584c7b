package kafkagrpc

// Admission: which of the calls read may go ahead. Two rules, both kept by
// the loop alone (so they need no locks and see the calls in the order
// their first records were read):
//
//   - at most Options.MaxCallsPerPartition calls of one request partition
//     are admitted at a time (beside the worker's Options.MaxCalls over
//     all partitions), so that one busy partition cannot take every slot
//     from the others;
//   - calls of one record key in a partition are admitted one after
//     another, in the order of their first records: the next starts once
//     the one before it was settled (its end record acknowledged, or it
//     failed). Kafka keeps a key's records in order; a producer that keys
//     its requests (a grpc-kafka route's with.key) asks for that order, and
//     calls made concurrently on HTTP/2 streams would lose it. The
//     grpc-kafka binding keys a request by its correlation id unless told
//     otherwise, so by default every call has a key of its own and nothing
//     waits for another.
//
// A call not admitted holds its records (they were read) and its silence
// counts towards limits.reply-timeout.

// partCalls are the calls of one request partition, for admission.
type partCalls struct {
	running int     // admitted and not yet settled
	queue   []*call // not yet admitted, in the order of their first records
	// last is the latest call of each record key not yet settled: the
	// call a new one of that key waits for.
	last map[string]*call
}

// enqueue adds a new call to its partition's queue and admits what may go.
func (w *Worker) enqueue(c *call) {
	pc := w.parts[c.part]
	if pc == nil {
		pc = &partCalls{last: map[string]*call{}}
		w.parts[c.part] = pc
	}
	if c.key != "" {
		c.after = pc.last[c.key]
		pc.last[c.key] = c
	}
	pc.queue = append(pc.queue, c)
	w.admit(c.part)
}

// admit lets the queued calls of p go, first read first, while the
// partition's bound allows and the call before each of the same key was
// settled.
func (w *Worker) admit(p part) {
	pc := w.parts[p]
	if pc == nil {
		return
	}
	kept := pc.queue[:0]
	for _, c := range pc.queue {
		switch {
		case c.ended: // settled without being admitted (its context ended)
		case pc.running < w.opts.MaxCallsPerPartition && (c.after == nil || c.after.ended):
			c.after = nil // nothing keeps a chain of settled calls alive
			c.admitted = true
			pc.running++
			close(c.admit)
		default:
			kept = append(kept, c)
		}
	}
	clear(pc.queue[len(kept):])
	pc.queue = kept
}

// release gives back c's place in its partition, once c is settled, and
// admits the calls that were waiting for it.
func (w *Worker) release(c *call) {
	pc := w.parts[c.part]
	if pc == nil {
		return // the partition was revoked
	}
	if c.admitted {
		pc.running--
	}
	if c.key != "" && pc.last[c.key] == c {
		delete(pc.last, c.key)
	}
	w.admit(c.part)
}
