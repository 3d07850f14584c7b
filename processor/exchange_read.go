package processor

import (
	"errors"
	"io"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// reader is the exchange's reader goroutine's state.
type reader struct {
	in   chan *extprocv3.ProcessingRequest // closed when Recv fails
	err  error                             // why Recv failed; written before in is closed, read only after
	stop chan struct{}                     // closed when the exchange ends
	done chan struct{}
}

// startReader hands Recv to a reader goroutine from now on. Only the
// exchange's goroutine calls it.
func (x *exchange) startReader() {
	if x.rd != nil || x.inClosed {
		return
	}
	rd := &reader{
		in:   make(chan *extprocv3.ProcessingRequest, inboundQueue),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	x.rd = rd
	x.s.live.Add(1)
	go x.read(rd)
}

// read is the reader goroutine: once started, the only caller of Recv.
func (x *exchange) read(rd *reader) {
	defer x.s.live.Done()
	defer close(rd.done)
	defer close(rd.in)
	for {
		req, err := x.w.stream.Recv()
		if err != nil {
			rd.err = err
			return
		}
		select {
		case rd.in <- req:
		case <-rd.stop:
			return
		}
	}
}

// next waits for the next ext_proc message; false once the stream ended.
func (x *exchange) next() (*extprocv3.ProcessingRequest, bool) {
	if x.inClosed {
		return nil, false
	}
	if x.rd == nil {
		// Recv returns when the stream is cancelled, so this waits no longer
		// than the select below would.
		req, err := x.w.stream.Recv()
		if err != nil {
			x.recvEnded(err)
			return nil, false
		}
		return req, true
	}
	select {
	case m, ok := <-x.rd.in:
		if !ok {
			x.recvEnded(x.rd.err)
		}
		return m, ok
	case <-x.ctx.Done():
		return nil, false
	}
}

// recvEnded records that Recv failed with err: the request stream ended.
// With a reader, call it only once rd.in is closed.
func (x *exchange) recvEnded(err error) {
	x.inClosed = true
	x.halfClosed = errors.Is(err, io.EOF)
}

// clientGone reports whether the stream ended because Envoy cancelled it (the
// client went away) rather than by a half-close.
func (x *exchange) clientGone() bool {
	return x.ctx.Err() != nil || (x.inClosed && !x.halfClosed)
}

// inOrNil is the reader's channel until it is closed, then nil (never ready);
// nil too without a reader.
func (x *exchange) inOrNil() <-chan *extprocv3.ProcessingRequest {
	if x.inClosed || x.rd == nil {
		return nil
	}
	return x.rd.in
}
