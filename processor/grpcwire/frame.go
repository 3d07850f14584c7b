// Package grpcwire holds what the processor needs of gRPC's HTTP/2 wire format
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) without a
// gRPC server: length-prefixed message framing over arbitrary chunks,
// grpc-message percent-encoding, grpc-timeout parsing, content-type
// recognition, and status mapping between gRPC and HTTP.
//
// Envoy's ext_proc filter hands request bodies over in chunks that follow its
// socket reads, not message boundaries, so the Decoder reassembles messages
// itself and enforces a per-message size limit before buffering a byte of the
// message body.
package grpcwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// PrefixLen is the length of a message prefix: a compressed flag and a
// 4-byte big-endian length.
const PrefixLen = 5

// initialBody caps the first allocation for a message that spans chunks.
const initialBody = 64 << 10

// Errors reported by the Decoder; a returned error wraps exactly one of them.
var (
	// ErrTooLarge: a message prefix announced more bytes than the limit.
	ErrTooLarge = errors.New("message larger than the limit")
	// ErrTruncated: the stream ended inside a message.
	ErrTruncated = errors.New("stream ended inside a message")
	// ErrBadFlag: the compressed flag was neither 0 nor 1.
	ErrBadFlag = errors.New("invalid compressed flag")
)

// Message is one length-prefixed gRPC message.
type Message struct {
	// Compressed is the prefix's flag: the data is compressed with the
	// request's grpc-encoding.
	Compressed bool
	// Data is the message without its prefix. It may alias the chunk passed
	// to Feed, so the caller must not modify that chunk afterwards.
	Data []byte
}

// Decoder reassembles length-prefixed messages from a byte stream delivered in
// arbitrary chunks. The zero value has no limit; use NewDecoder for one.
// A Decoder is not safe for concurrent use. After an error it stays failed.
type Decoder struct {
	limit int64

	prefix  [PrefixLen]byte
	nprefix int // bytes of prefix held

	inBody     bool // prefix complete, body being assembled
	compressed bool
	body       []byte // partial body (only when it spans chunks)
	need       int    // body bytes still missing

	err error
}

// NewDecoder returns a decoder refusing messages longer than limit bytes
// (limit <= 0: no limit beyond the 4 GiB the prefix can express).
func NewDecoder(limit int64) *Decoder {
	return &Decoder{limit: limit}
}

// Feed consumes one chunk and calls emit, in order, for every message the chunk
// completes. It stops at the first error: a framing error (wrapping ErrTooLarge
// or ErrBadFlag), or the error emit returned, which is returned unchanged.
func (d *Decoder) Feed(chunk []byte, emit func(Message) error) error {
	if d.err != nil {
		return d.err
	}
	for len(chunk) > 0 {
		if !d.inBody {
			n := copy(d.prefix[d.nprefix:], chunk)
			d.nprefix += n
			chunk = chunk[n:]
			if d.nprefix < PrefixLen {
				return nil
			}
			if err := d.startBody(); err != nil {
				d.err = err
				return err
			}
			if d.need == 0 {
				if err := d.complete(emit, nil); err != nil {
					return err
				}
				continue
			}
		}
		if d.body == nil && len(chunk) >= d.need {
			// The whole body is in this chunk: hand it over without copying.
			data := chunk[:d.need:d.need]
			chunk = chunk[d.need:]
			if err := d.complete(emit, data); err != nil {
				return err
			}
			continue
		}
		if d.body == nil {
			// Spans chunks. Grow with what arrives rather than trusting the
			// announced size: a peer may announce much and send little.
			d.body = make([]byte, 0, min(d.need, initialBody))
		}
		n := min(len(chunk), d.need)
		d.body = append(d.body, chunk[:n]...)
		d.need -= n
		chunk = chunk[n:]
		if d.need == 0 {
			data := d.body
			d.body = nil
			if err := d.complete(emit, data); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Decoder) startBody() error {
	flag := d.prefix[0]
	size := binary.BigEndian.Uint32(d.prefix[1:])
	if flag > 1 {
		return fmt.Errorf("grpc message prefix: %w %d", ErrBadFlag, flag)
	}
	if d.limit > 0 && int64(size) > d.limit {
		return &SizeError{Size: int64(size), Limit: d.limit}
	}
	if uint64(size) > math.MaxInt {
		return &SizeError{Size: int64(size), Limit: math.MaxInt}
	}
	d.inBody = true
	d.compressed = flag == 1
	d.need = int(size)
	return nil
}

func (d *Decoder) complete(emit func(Message) error, data []byte) error {
	m := Message{Compressed: d.compressed, Data: data}
	if m.Data == nil {
		m.Data = []byte{}
	}
	d.inBody, d.nprefix, d.need, d.compressed = false, 0, 0, false
	return emit(m)
}

// End reports whether the stream ended on a message boundary: nil, or an
// error wrapping ErrTruncated (or the decoder's earlier error).
func (d *Decoder) End() error {
	if d.err != nil {
		return d.err
	}
	if d.nprefix > 0 || d.inBody {
		held := d.nprefix
		if d.inBody {
			held += len(d.body)
		}
		return fmt.Errorf("grpc message: %w (%d bytes of an unfinished message)", ErrTruncated, held)
	}
	return nil
}

// SizeError reports a message whose prefix announced more than the limit.
// It wraps ErrTooLarge.
type SizeError struct {
	Size  int64
	Limit int64
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("grpc message of %d bytes is larger than the limit of %d bytes", e.Size, e.Limit)
}

func (e *SizeError) Unwrap() error { return ErrTooLarge }

// AppendFrame appends msg, uncompressed, with its 5-byte prefix to dst.
func AppendFrame(dst, msg []byte) []byte {
	var p [PrefixLen]byte
	binary.BigEndian.PutUint32(p[1:], uint32(len(msg)))
	dst = append(dst, p[:]...)
	return append(dst, msg...)
}

// Frame returns msg, uncompressed, with its 5-byte prefix.
func Frame(msg []byte) []byte {
	return AppendFrame(make([]byte, 0, PrefixLen+len(msg)), msg)
}
