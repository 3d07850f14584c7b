package kafkaio

import (
	"context"
	"fmt"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// readerPool holds the history readers of a cluster: consumers leased for
// one batch at a time, so a stream that stops reading never holds one, and
// at most LogTailsOptions.Readers read at once whatever the number of streams.
type readerPool struct {
	l   *LogTails
	sem chan struct{}

	mu     sync.Mutex
	idle   []*histReader
	closed bool
}

type histReader struct {
	cons *kafka.Consumer
	stop chan struct{} // ends its log forwarder
}

func newReaderPool(l *LogTails) *readerPool {
	return &readerPool{l: l, sem: make(chan struct{}, l.opts.Readers)}
}

// lease waits for a free reader (bounded by ctx) and returns it unassigned.
func (rp *readerPool) lease(ctx context.Context) (*histReader, error) {
	select {
	case rp.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for a history reader: %w", ErrNotReady, ctx.Err())
	case <-rp.l.ctx.Done():
		return nil, ErrLogsClosed
	}
	rp.mu.Lock()
	if rp.closed {
		rp.mu.Unlock()
		<-rp.sem
		return nil, ErrLogsClosed
	}
	if n := len(rp.idle); n > 0 {
		rd := rp.idle[n-1]
		rp.idle = rp.idle[:n-1]
		rp.mu.Unlock()
		return rd, nil
	}
	rp.mu.Unlock()
	cm := withoutStatistics(consumerConfig(rp.l.opts.Properties, rp.l.opts.KafkaTimeout, rp.l.c.groupID+"-history"))
	// A batch is at most BatchBytes of frames: prefetch little, as what is
	// fetched beyond the batch is dropped with the assignment.
	(*cm)["queued.max.messages.kbytes"] = 2048
	(*cm)["fetch.max.bytes"] = 4 << 20
	(*cm)["max.partition.fetch.bytes"] = 1 << 20
	cons, err := kafka.NewConsumer(cm)
	if err != nil {
		<-rp.sem
		return nil, fmt.Errorf("%w: creating a history reader: %v", ErrNotReady, err)
	}
	rd := &histReader{cons: cons, stop: make(chan struct{})}
	rp.l.wg.Add(1)
	go func() {
		defer rp.l.wg.Done()
		forwardRdLogs(rp.l.logger, cons.Logs(), "history", rd.stop)
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
