package ssekafka

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
)

// frame is how an SSE stream's records travel through the log tails: the
// value stays contiguous, so a topic's ring framed by the first stream is
// read by gRPC and SSE streams alike (each takes the value out of the
// other's frames). Events are rendered from frames as they are sent:
//
//	kind (1 byte: record or tombstone) · length (u32) · value or key · id length (uvarint) · message id
type frame struct{}

const (
	kindRecord    = 0
	kindTombstone = 1
	framePrefix   = 5
)

// ValueOffset implements logtails.Framer.
func (frame) ValueOffset() int { return framePrefix }

// MaxFrame implements logtails.Framer.
func (frame) MaxFrame(valueLen, partitions int) int {
	id := 1 + binary.MaxVarintLen32 + partitions*(binary.MaxVarintLen32+binary.MaxVarintLen64)
	return framePrefix + valueLen + binary.MaxVarintLen32 + id
}

// AppendFrame implements logtails.Framer.
func (frame) AppendFrame(dst, value []byte, next []int64) []byte {
	return appendFrame(dst, kindRecord, value, next)
}

// AppendTombstone implements logtails.TombstoneFramer.
func (frame) AppendTombstone(dst, key []byte, next []int64) []byte {
	return appendFrame(dst, kindTombstone, key, next)
}

func appendFrame(dst []byte, kind byte, b []byte, next []int64) []byte {
	var p [framePrefix]byte
	p[0] = kind
	binary.BigEndian.PutUint32(p[1:], uint32(len(b)))
	dst = append(append(dst, p[:]...), b...)
	dst = binary.AppendUvarint(dst, uint64(grpcwire.MessageIDLen(next)))
	return grpcwire.AppendMessageID(dst, next)
}

var errBadFrame = errors.New("malformed stream frame")

// appendEvents renders the frames of chunk as events and counts them. The id is the
// message id in padded standard base64, as the reference implementation
// writes it, so an id issued by either resumes on the other.
func appendEvents(dst, chunk []byte) (_ []byte, events int, _ error) {
	for ; len(chunk) > 0; events++ {
		if len(chunk) < framePrefix {
			return dst, events, fmt.Errorf("%w: %d bytes left", errBadFrame, len(chunk))
		}
		kind, n := chunk[0], int(binary.BigEndian.Uint32(chunk[1:framePrefix]))
		if len(chunk) < framePrefix+n {
			return dst, events, fmt.Errorf("%w: value of %d bytes, %d left", errBadFrame, n, len(chunk)-framePrefix)
		}
		body, rest := chunk[framePrefix:framePrefix+n], chunk[framePrefix+n:]
		idLen, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < idLen {
			return dst, events, fmt.Errorf("%w: truncated id", errBadFrame)
		}
		id := rest[k : k+int(idLen)]
		chunk = rest[k+int(idLen):]
		if kind == kindTombstone {
			dst = append(dst, "event: delete\n"...)
		}
		dst = append(dst, "id: "...)
		dst = base64.StdEncoding.AppendEncode(dst, id)
		dst = append(dst, '\n')
		dst = appendData(dst, body)
		dst = append(dst, '\n')
	}
	return dst, events, nil
}

// appendData writes b as data lines: the format ends a field at CR, LF or
// CRLF, so each line of the value is a field of its own, and the browser
// joins them with LF. An empty value is one empty data line: an event
// without data is never dispatched.
func appendData(dst, b []byte) []byte {
	for {
		i := lineEnd(b)
		if i < 0 {
			dst = append(append(dst, "data: "...), b...)
			return append(dst, '\n')
		}
		dst = append(append(dst, "data: "...), b[:i]...)
		dst = append(dst, '\n')
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++
		}
		b = b[i+1:]
	}
}

// lineEnd is the index of the first CR or LF in b, or -1. Two IndexByte
// scans (vectorised) rather than IndexAny (a byte at a time): every event
// of every stream goes through it, and most values hold no line break.
func lineEnd(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	before := b
	if lf >= 0 {
		before = b[:lf]
	}
	if cr := bytes.IndexByte(before, '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// appendComment writes a comment line, which EventSource ignores: the
// heartbeat, and a stream's reason to end. Line breaks in text are spaces.
func appendComment(dst []byte, text string) []byte {
	dst = append(dst, ": "...)
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, "\n\n"...)
}
