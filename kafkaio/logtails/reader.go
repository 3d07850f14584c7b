package logtails

import (
	"context"
	"fmt"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// readerPool holds the history readers of a cluster: consumers leased for
// one batch at a time, so a stream that stops reading never holds one, and
// at most Options.Readers read at once whatever the number of streams.
type readerPool struct {
	l   *Tails
	sem chan struct{}

	mu     sync.Mutex
	idle   []*histReader
	closed bool
}

type histReader struct {
	cons *kafka.Consumer
	stop chan struct{} // ends its log forwarder
}

func newReaderPool(l *Tails) *readerPool {
	return &readerPool{l: l, sem: make(chan struct{}, l.opts.Readers)}
}

// lease waits for a free reader (bounded by ctx) and returns it unassigned.
func (rp *readerPool) lease(ctx context.Context) (*histReader, error) {
	select {
	case rp.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for a history reader: %w", client.ErrNotReady, ctx.Err())
	case <-rp.l.ctx.Done():
		return nil, ErrClosed
	}
	rp.mu.Lock()
	if rp.closed {
		rp.mu.Unlock()
		<-rp.sem
		return nil, ErrClosed
	}
	if n := len(rp.idle); n > 0 {
		rd := rp.idle[n-1]
		rp.idle = rp.idle[:n-1]
		rp.mu.Unlock()
		return rd, nil
	}
	rp.mu.Unlock()
	cons, err := kafka.NewConsumer(client.HistoryReaderConfig(rp.l.opts.Properties, rp.l.opts.KafkaTimeout, rp.l.c.GroupID()+"-history"))
	if err != nil {
		<-rp.sem
		return nil, fmt.Errorf("%w: creating a history reader: %v", client.ErrNotReady, err)
	}
	rd := &histReader{cons: cons, stop: make(chan struct{})}
	rp.l.wg.Add(1)
	go func() {
		defer rp.l.wg.Done()
		client.ForwardLogs(rp.l.logger, cons.Logs(), "history", rd.stop)
	}()
	return rd, nil
}

// release unassigns a reader, drops what it still queued, and returns it.
func (rp *readerPool) release(rd *histReader) {
	defer func() { <-rp.sem }()
	if err := rd.cons.Unassign(); err != nil {
		rp.l.logger.Debug("unassigning a history reader failed; closing it", "err", err)
		rp.discard(rd)
		return
	}
	for i := 0; i < 10000 && rd.cons.Poll(0) != nil; i++ {
	}
	rp.mu.Lock()
	if !rp.closed {
		rp.idle = append(rp.idle, rd)
		rp.mu.Unlock()
		return
	}
	rp.mu.Unlock()
	rp.discard(rd)
}

func (rp *readerPool) discard(rd *histReader) {
	_ = rd.cons.Close()
	close(rd.stop)
}

// leased is how many readers are in use.
func (rp *readerPool) leased() int { return len(rp.sem) }

// close closes the idle readers; leased ones close on release.
func (rp *readerPool) close() {
	rp.mu.Lock()
	rp.closed = true
	idle := rp.idle
	rp.idle = nil
	rp.mu.Unlock()
	for _, rd := range idle {
		rp.discard(rd)
	}
}
