package ssekafka

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/streampace"
)

// sender renders the log stream's chunks as events and sends them.
type sender struct {
	out  handler.EventWriter
	last *atomic.Int64 // unix nanoseconds of the last send, read by the heartbeat
	pace *streampace.Pacer
	// events counts the events sent, for the handler's metrics.
	events *atomic.Int64
	buf    []byte
}

func (s *sender) touch() { s.last.Store(time.Now().UnixNano()) }

func (s *sender) idle() time.Duration { return time.Duration(time.Now().UnixNano() - s.last.Load()) }

// loop sends, paced, until a read or a send fails.
func (s *sender) loop(ctx context.Context, ls *logtails.Stream) error {
	defer s.pace.Stop()
	for {
		if err := s.pace.Wait(ctx); err != nil {
			return err
		}
		chunk, err := ls.Next(ctx)
		if err != nil {
			return err
		}
		var n int
		s.buf, n, err = appendEvents(s.buf[:0], chunk)
		if err != nil {
			return err
		}
		if err := s.out.Send(ctx, s.buf); err != nil {
			return err
		}
		s.events.Add(int64(n))
		s.pace.Sent(ls.Behind())
		s.touch()
	}
}

// heartbeat is the timer of a stream's heartbeat comments.
type heartbeat struct{ t *time.Timer }

func newHeartbeat(d time.Duration) *heartbeat { return &heartbeat{t: time.NewTimer(d)} }

func (b *heartbeat) c() <-chan time.Time { return b.t.C }

func (b *heartbeat) reset(d time.Duration) { b.t.Reset(d) }

func (b *heartbeat) stop() { b.t.Stop() }
