package grpcwire

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Message ids and the reliability field of grpc-kafka fetch streams
// (docs/design.md#grpc-kafka-fetch-streams).
//
// A message id is the position of a stream: for every partition of the topic,
// the next offset to deliver. Its bytes are
//
//	0x01                                 kind (version 1)
//	zigzag varint  partition count
//	repeat count:  zigzag varint partition, zigzag varint next offset
//
// with zig-zag LEB128 varints, as Zilla (the reference implementation)
// writes them, so ids issued by either resume on the other. A stream appends the id of a
// message to the message itself as an unknown protobuf field: the tag
// (field << 3 | 2), a plain varint length, then the id bytes. A client
// captures the field's bytes and sends them back, base64-encoded, in the
// reliability metadata (text) or its -bin variant to resume after that
// message.

// messageIDKind is the first byte of a version 1 message id.
const messageIDKind = 0x01

// MaxIDPartitions bounds the partitions a message id may name: far above any
// real topic, low enough that a hostile id cannot make us allocate much.
const MaxIDPartitions = 1 << 16

// ErrBadMessageID is wrapped by the errors of DecodeMessageID and
// ParseMessageID.
var ErrBadMessageID = errors.New("malformed message id")

// MaxFieldNumber is the largest protobuf field number.
const MaxFieldNumber = 1<<29 - 1

// zigzag maps signed to unsigned as protobuf's sint64 does.
func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// AppendMessageID appends the id of positions (next offset per partition,
// indexed by partition) to dst.
func AppendMessageID(dst []byte, next []int64) []byte {
	dst = append(dst, messageIDKind)
	dst = binary.AppendUvarint(dst, zigzag(int64(len(next))))
	for p, off := range next {
		dst = binary.AppendUvarint(dst, zigzag(int64(p)))
		dst = binary.AppendUvarint(dst, zigzag(off))
	}
	return dst
}

// AppendMessageIDOf appends the id of positions by partition (partitions
// in order; those it does not name resume at the log start) to dst.
func AppendMessageIDOf(dst []byte, next map[int32]int64) []byte {
	dst = append(dst, messageIDKind)
	dst = binary.AppendUvarint(dst, zigzag(int64(len(next))))
	for _, p := range slices.Sorted(maps.Keys(next)) {
		dst = binary.AppendUvarint(dst, zigzag(int64(p)))
		dst = binary.AppendUvarint(dst, zigzag(next[p]))
	}
	return dst
}

// MessageIDLen is the length AppendMessageID appends for next.
func MessageIDLen(next []int64) int {
	n := 1 + uvarintLen(zigzag(int64(len(next))))
	for p, off := range next {
		n += uvarintLen(zigzag(int64(p))) + uvarintLen(zigzag(off))
	}
	return n
}

func uvarintLen(u uint64) int {
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// DecodeMessageID decodes the bytes of a message id into positions by
// partition. Partitions must be distinct and offsets non-negative; nothing
// may follow the last pair.
func DecodeMessageID(b []byte) (map[int32]int64, error) {
	if len(b) == 0 || b[0] != messageIDKind {
		return nil, fmt.Errorf("%w: it does not start with 0x01", ErrBadMessageID)
	}
	b = b[1:]
	next := func(what string) (int64, error) {
		u, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: truncated %s", ErrBadMessageID, what)
		}
		b = b[n:]
		return unzigzag(u), nil
	}
	count, err := next("partition count")
	if err != nil {
		return nil, err
	}
	if count < 0 || count > MaxIDPartitions || count > int64(len(b)/2) {
		return nil, fmt.Errorf("%w: partition count %d", ErrBadMessageID, count)
	}
	out := make(map[int32]int64, count)
	for i := int64(0); i < count; i++ {
		p, err := next("partition")
		if err != nil {
			return nil, err
		}
		off, err := next("offset")
		if err != nil {
			return nil, err
		}
		if p < 0 || p >= MaxIDPartitions {
			return nil, fmt.Errorf("%w: partition %d", ErrBadMessageID, p)
		}
		if off < 0 {
			return nil, fmt.Errorf("%w: offset %d of partition %d", ErrBadMessageID, off, p)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("%w: partition %d named twice", ErrBadMessageID, p)
		}
		out[int32(p)] = off
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last partition", ErrBadMessageID, len(b))
	}
	return out, nil
}

// ParseMessageID decodes a message id as a client sends it in metadata:
// base64 in the URL-safe or the standard alphabet, padded or not (the text
// header, and the value of the -bin header as gRPC libraries encode it).
func ParseMessageID(s string) (map[int32]int64, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	enc := base64.RawURLEncoding
	if strings.ContainsAny(s, "+/") {
		enc = base64.RawStdEncoding
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64: %v", ErrBadMessageID, err)
	}
	return DecodeMessageID(b)
}

// FieldTagLen is the length of the tag of a length-delimited field.
func FieldTagLen(field int) int { return uvarintLen(uint64(field)<<3 | 2) }

// AppendBytesField appends a length-delimited protobuf field (tag
// field<<3|2, varint length, bytes).
func AppendBytesField(dst []byte, field int, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(field)<<3|2)
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// ReliableFrame frames fetch messages: the record value followed by the
// reliability field holding the message id. It is comparable, so streams
// can tell whether they frame alike (and share frames).
type ReliableFrame struct {
	Field int // the options' reliability.field, 1..536870911
}

// ValueOffset is where the value starts in a frame: after the prefix.
func (f ReliableFrame) ValueOffset() int { return PrefixLen }

// MaxFrame bounds the length of a frame of a value of valueLen bytes on a
// topic of partitions partitions.
func (f ReliableFrame) MaxFrame(valueLen, partitions int) int {
	id := 1 + binary.MaxVarintLen32 + partitions*(binary.MaxVarintLen32+binary.MaxVarintLen64)
	return PrefixLen + valueLen + FieldTagLen(f.Field) + binary.MaxVarintLen32 + id
}

// AppendFrame appends one length-prefixed message: value, then the field
// holding the id of next.
func (f ReliableFrame) AppendFrame(dst, value []byte, next []int64) []byte {
	idLen := MessageIDLen(next)
	size := len(value) + FieldTagLen(f.Field) + uvarintLen(uint64(idLen)) + idLen
	var p [PrefixLen]byte
	binary.BigEndian.PutUint32(p[1:], uint32(size))
	dst = append(dst, p[:]...)
	dst = append(dst, value...)
	dst = binary.AppendUvarint(dst, uint64(f.Field)<<3|2)
	dst = binary.AppendUvarint(dst, uint64(idLen))
	return AppendMessageID(dst, next)
}
