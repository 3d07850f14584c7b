package grpcwire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"maps"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Vectors of Zilla's encoding (the reference implementation: values from
// its test scripts and examples, the rest computed to its layout). The same
// layout serves its ETags and its gRPC message ids; matching it byte for
// byte is what lets ids either issues resume on the other.
func TestMessageIDVectors(t *testing.T) {
	for _, tc := range []struct {
		next []int64
		hex  string
	}{
		{[]int64{2, 1}, "010400040202"},
		{[]int64{3, 1}, "010400060202"},
		{[]int64{0}, "01020000"},
		{[]int64{1}, "01020002"},
		{[]int64{2}, "01020004"},
		{[]int64{300}, "010200d804"},
		{nil, "0100"},
	} {
		got := AppendMessageID(nil, tc.next)
		if hex.EncodeToString(got) != tc.hex {
			t.Errorf("%v: %x, want %s", tc.next, got, tc.hex)
		}
		if MessageIDLen(tc.next) != len(got) {
			t.Errorf("%v: MessageIDLen %d, encoded %d", tc.next, MessageIDLen(tc.next), len(got))
		}
		back, err := DecodeMessageID(got)
		if err != nil {
			t.Fatalf("%v: %v", tc.next, err)
		}
		if len(back) != len(tc.next) {
			t.Fatalf("%v: decoded %v", tc.next, back)
		}
		for p, off := range tc.next {
			if back[int32(p)] != off {
				t.Errorf("%v: decoded %v", tc.next, back)
			}
		}
	}
}

// The exact bytes a fetch message carries for {p0:1} with the default field,
// and with another field number.
func TestReliableFrameBytes(t *testing.T) {
	value := []byte{0x0a, 0x01, 'x'}
	frame := ReliableFrame{Field: 32767}.AppendFrame(nil, value, []int64{1})
	want := append(Frame(nil)[:0:0], 0, 0, 0, 0, 11)
	want = append(want, value...)
	want = append(want, 0xFA, 0xFF, 0x0F, 0x04, 0x01, 0x02, 0x00, 0x02)
	if !bytes.Equal(frame, want) {
		t.Fatalf("frame % X\nwant  % X", frame, want)
	}
	frame = ReliableFrame{Field: 9}.AppendFrame(nil, nil, []int64{1})
	if want := []byte{0, 0, 0, 0, 6, 0x4A, 0x04, 0x01, 0x02, 0x00, 0x02}; !bytes.Equal(frame, want) {
		t.Fatalf("field 9: % X, want % X", frame, want)
	}
	// protowire agrees on the tag and length of every field number.
	for _, field := range []int{1, 15, 16, 2047, 2048, 32767, 262143, 262144, MaxFieldNumber} {
		next := []int64{5, 0, math.MaxInt64}
		f := ReliableFrame{Field: field}
		frame := f.AppendFrame(nil, []byte("v"), next)
		if len(frame) > f.MaxFrame(1, len(next)) {
			t.Errorf("field %d: frame %d bytes above MaxFrame %d", field, len(frame), f.MaxFrame(1, len(next)))
		}
		body := frame[PrefixLen+1:]
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 || int(num) != field || typ != protowire.BytesType {
			t.Fatalf("field %d: tag %d %d (%d)", field, num, typ, n)
		}
		id, m := protowire.ConsumeBytes(body[n:])
		if m < 0 || n+m != len(body) {
			t.Fatalf("field %d: bytes %d", field, m)
		}
		if !bytes.Equal(id, AppendMessageID(nil, next)) {
			t.Fatalf("field %d: id % X", field, id)
		}
		if frame[0] != 0 || int(binary.BigEndian.Uint32(frame[1:PrefixLen])) != len(frame)-PrefixLen {
			t.Fatalf("field %d: prefix % X for %d bytes", field, frame[:PrefixLen], len(frame)-PrefixLen)
		}
	}
}

// Clients send ids in every base64 flavour: URL-safe or standard, padded or
// not (gRPC libraries encode -bin values in the standard alphabet, some
// without padding).
func TestParseMessageIDEncodings(t *testing.T) {
	// Offset 127 makes the standard encoding use '/' where the URL-safe one uses '_'.
	raw := AppendMessageID(nil, []int64{127, 7})
	want := map[int32]int64{0: 127, 1: 7}
	encs := map[string]string{
		"url padded":   base64.URLEncoding.EncodeToString(raw),
		"url raw":      base64.RawURLEncoding.EncodeToString(raw),
		"std padded":   base64.StdEncoding.EncodeToString(raw),
		"std raw":      base64.RawStdEncoding.EncodeToString(raw),
		"with spacing": " " + base64.StdEncoding.EncodeToString(raw) + " ",
	}
	if encs["url raw"] == encs["std raw"] {
		t.Fatalf("the vector does not tell the alphabets apart: %s", encs["url raw"])
	}
	for name, s := range encs {
		got, err := ParseMessageID(s)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("%s %q: %v %v", name, s, got, err)
		}
	}
	for _, bad := range []string{"", "!!!!", "AQ", "AgIAAg", "AQIAAgA", "AQQAAgAC", "AQIAAw", "AQIBAg-_+/"} {
		if _, err := ParseMessageID(bad); !errors.Is(err, ErrBadMessageID) {
			t.Errorf("%q: %v, want ErrBadMessageID", bad, err)
		}
	}
}

func FuzzMessageID(f *testing.F) {
	f.Add([]byte{1, 2, 0, 2})
	f.Add([]byte{1, 4, 0, 4, 2, 2})
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1, 4, 0, 2, 0, 2})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeMessageID(b)
		if s, err2 := ParseMessageID(base64.RawURLEncoding.EncodeToString(b)); (err == nil) != (err2 == nil) || !maps.Equal(got, s) {
			t.Fatalf("bytes and base64 disagree: %v %v / %v %v", got, err, s, err2)
		}
		if err != nil {
			if !errors.Is(err, ErrBadMessageID) {
				t.Fatalf("error %v does not wrap ErrBadMessageID", err)
			}
			return
		}
		// A valid id re-encodes to itself when its partitions are 0..n-1 in order.
		dense := make([]int64, len(got))
		for p, off := range got {
			if int(p) >= len(dense) {
				return
			}
			dense[p] = off
		}
		if re := AppendMessageID(nil, dense); len(re) == len(b) && !bytes.Equal(re, b) {
			// Same partitions, different order or non-minimal varints: decode again.
			back, err := DecodeMessageID(re)
			if err != nil || !maps.Equal(back, got) {
				t.Fatalf("re-encoding %v: %v %v", got, back, err)
			}
		}
	})
}

// An id of positions by partition decodes to the same positions, with the
// partitions in order whatever the map's; an empty one resumes every
// partition at the log start.
func TestAppendMessageIDOf(t *testing.T) {
	for _, next := range []map[int32]int64{{}, {0: 3}, {2: 7, 0: 1, 5: 300}} {
		b := AppendMessageIDOf(nil, next)
		got, err := DecodeMessageID(b)
		if err != nil {
			t.Fatalf("%v: %v", next, err)
		}
		if !maps.Equal(got, next) {
			t.Errorf("%v: decoded %v", next, got)
		}
	}
	if got := AppendMessageIDOf(nil, map[int32]int64{1: 2, 0: 1}); !bytes.Equal(got, AppendMessageID(nil, []int64{1, 2})) {
		t.Errorf("sparse encoding of every partition % x differs from the dense one", got)
	}
}
