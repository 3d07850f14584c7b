package views

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// handOverGap is the least time between two hand-overs of caught-up views
// to the live consumer. librdkafka gives each partition of a consumer with
// statistics on a timer of its own (consumer lag, every statistics
// interval), started when the partition is first assigned: views handed
// over one by one as their catch-ups end (1,000 views over the first
// seconds) leave up to one timer phase per view, and the client's main
// thread wakes for each, every interval, for as long as the views live:
// with 1,000 quiet views that was most of what the processor's librdkafka
// threads did over a raw consumer assigned the same partitions at once.
// Views that catch up within the gap are handed over together, in one
// assignment, so their timers fire in one wake-up. A view that catches up
// alone is handed over at once; one in a burst waits at most the gap.
const handOverGap = 200 * time.Millisecond

// handOverReq asks the hand-over loop to assign parts to the live consumer;
// the outcome is sent on done (buffered).
type handOverReq struct {
	parts []kafka.TopicPartition
	done  chan error
}

// handOver assigns parts to the live consumer with the other hand-overs
// asked for meanwhile (see handOverGap), and returns the outcome.
func (c *Views) handOver(parts []kafka.TopicPartition) error {
	req := handOverReq{parts: parts, done: make(chan error, 1)}
	select {
	case c.handOvers <- req:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

// handOverLoop runs while the client lives, serving handOver: the first
// request after a gap is assigned at once, the ones that come within
// handOverGap of the last assignment together when the gap has passed.
func (c *Views) handOverLoop() {
	defer c.wg.Done()
	var last time.Time
	for {
		var batch []handOverReq
		select {
		case <-c.ctx.Done():
			return
		case r := <-c.handOvers:
			batch = append(batch, r)
		}
		if wait := handOverGap - time.Since(last); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
		gather:
			for {
				select {
				case r := <-c.handOvers:
					batch = append(batch, r)
				case <-t.C:
					break gather
				case <-c.ctx.Done():
					t.Stop()
					return
				}
			}
		}
		for queued := true; queued; {
			select {
			case r := <-c.handOvers:
				batch = append(batch, r)
			default:
				queued = false
			}
		}
		c.assignBatch(batch)
		last = time.Now()
	}
}

// assignBatch makes one assignment of every request's partitions. Should it
// fail, each request is assigned on its own, so one view's failure is not
// every view's.
func (c *Views) assignBatch(batch []handOverReq) {
	c.assignMu.Lock()
	defer c.assignMu.Unlock()
	if len(batch) > 1 {
		var parts []kafka.TopicPartition
		for _, r := range batch {
			parts = append(parts, r.parts...)
		}
		if err := c.live.IncrementalAssign(parts); err == nil {
			for _, r := range batch {
				r.done <- nil
			}
			return
		}
	}
	for _, r := range batch {
		r.done <- c.live.IncrementalAssign(r.parts)
	}
}
