package grpcwire

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"testing"
)

// BenchmarkDecoderFeed reassembles length-prefixed messages from request
// body chunks: small messages several to a chunk (each handed over without
// a copy), and a 64 KiB message spanning 16 KiB chunks (copied once into a
// buffer of its own).
func BenchmarkDecoderFeed(b *testing.B) {
	for _, tc := range []struct {
		name           string
		msgSize, count int
		chunk          int
	}{
		{"200B-x256-one-chunk", 200, 256, 1 << 20},
		{"200B-x256-16KiB-chunks", 200, 256, 16 << 10},
		{"64KiB-16KiB-chunks", 64 << 10, 1, 16 << 10},
	} {
		var stream []byte
		for i := range tc.count {
			stream = AppendFrame(stream, bytes.Repeat([]byte{byte(i)}, tc.msgSize))
		}
		var chunks [][]byte
		for rest := stream; len(rest) > 0; {
			n := min(tc.chunk, len(rest))
			chunks, rest = append(chunks, rest[:n]), rest[n:]
		}
		got := 0
		emit := func(m Message) error { got += len(m.Data); return nil }
		feed := func() {
			d := Decoder{limit: 4 << 20}
			for _, c := range chunks {
				if err := d.Feed(c, emit); err != nil {
					panic(err)
				}
			}
			if err := d.End(); err != nil {
				panic(err)
			}
		}
		feed()
		if got != tc.msgSize*tc.count {
			b.Fatalf("%d bytes of messages, want %d", got, tc.msgSize*tc.count)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				feed()
			}
		})
	}
}

// BenchmarkAppendFrame frames one 200-byte response message.
func BenchmarkAppendFrame(b *testing.B) {
	msg := bytes.Repeat([]byte{'x'}, 200)
	buf := make([]byte, 0, 1024)
	if f := AppendFrame(buf, msg); len(f) != PrefixLen+len(msg) || f[4] != 200 {
		b.Fatalf("frame % x", f[:PrefixLen])
	}
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendFrame(buf[:0], msg)
	}
}

// benchNext is the next offset of each of n partitions, in the millions as
// on a topic that has lived a while.
func benchNext(n int) []int64 {
	next := make([]int64, n)
	for p := range next {
		next[p] = 7_000_000 + int64(p)*1_234
	}
	return next
}

// BenchmarkReliableFrame frames a fetch-stream message: a 200-byte value,
// then the reliability field (FA FF 0F for field 32767, then the message
// id: next offset per partition) on topics of 1, 12 and 100 partitions.
func BenchmarkReliableFrame(b *testing.B) {
	f := ReliableFrame{Field: 32767}
	value := bytes.Repeat([]byte{'v'}, 200)
	for _, n := range []int{1, 12, 100} {
		next := benchNext(n)
		buf := make([]byte, 0, f.MaxFrame(len(value), n))
		frame := f.AppendFrame(buf, value, next)
		field := frame[PrefixLen+len(value):]
		if !bytes.HasPrefix(field, []byte{0xfa, 0xff, 0x0f}) || len(frame) > cap(buf) {
			b.Fatalf("field % x, frame %d of at most %d bytes", field[:3], len(frame), cap(buf))
		}
		b.Run("partitions="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf = f.AppendFrame(buf[:0], value, next)
			}
		})
	}
}

// BenchmarkParseMessageID decodes the reliability metadata a resuming
// client sends (base64 of the message id).
func BenchmarkParseMessageID(b *testing.B) {
	for _, n := range []int{1, 12, 100} {
		next := benchNext(n)
		s := base64.RawURLEncoding.EncodeToString(AppendMessageID(nil, next))
		got, err := ParseMessageID(s)
		if err != nil || len(got) != n || got[int32(n-1)] != next[n-1] {
			b.Fatalf("ParseMessageID = %v, %v", got, err)
		}
		b.Run("partitions="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseMessageID(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
