package grpcwire

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// decodeAll feeds data split at the given cut points and returns the messages
// and the error of Feed or End.
func decodeAll(limit int64, data []byte, cuts []int) ([]Message, error) {
	d := NewDecoder(limit)
	var out []Message
	emit := func(m Message) error {
		out = append(out, Message{Compressed: m.Compressed, Data: bytes.Clone(m.Data)})
		return nil
	}
	prev := 0
	for _, c := range append(cuts, len(data)) {
		if c < prev || c > len(data) {
			continue
		}
		if err := d.Feed(data[prev:c], emit); err != nil {
			return out, err
		}
		prev = c
	}
	return out, d.End()
}

func TestDecoderSplitsEverywhere(t *testing.T) {
	msgs := [][]byte{[]byte("hello"), {}, bytes.Repeat([]byte{0xab}, 300), []byte("x")}
	var stream []byte
	for _, m := range msgs {
		stream = AppendFrame(stream, m)
	}
	// Every single cut point, and every pair of cut points.
	for i := 0; i <= len(stream); i++ {
		for j := i; j <= len(stream); j += 7 {
			got, err := decodeAll(0, stream, []int{i, j})
			if err != nil {
				t.Fatalf("cuts %d,%d: %v", i, j, err)
			}
			if len(got) != len(msgs) {
				t.Fatalf("cuts %d,%d: %d messages, want %d", i, j, len(got), len(msgs))
			}
			for k := range msgs {
				if !bytes.Equal(got[k].Data, msgs[k]) || got[k].Compressed {
					t.Fatalf("cuts %d,%d: message %d = %q", i, j, k, got[k].Data)
				}
			}
		}
	}
}

func TestDecoderOneByteChunks(t *testing.T) {
	stream := AppendFrame(AppendFrame(nil, []byte("ab")), []byte("cde"))
	cuts := make([]int, len(stream))
	for i := range cuts {
		cuts[i] = i
	}
	got, err := decodeAll(0, stream, cuts)
	if err != nil || len(got) != 2 || string(got[0].Data) != "ab" || string(got[1].Data) != "cde" {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestDecoderCompressedFlag(t *testing.T) {
	frame := Frame([]byte("zz"))
	frame[0] = 1
	got, err := decodeAll(0, frame, nil)
	if err != nil || len(got) != 1 || !got[0].Compressed {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestDecoderBadFlag(t *testing.T) {
	frame := Frame([]byte("zz"))
	frame[0] = 2
	_, err := decodeAll(0, frame, nil)
	if !errors.Is(err, ErrBadFlag) {
		t.Fatalf("err = %v, want ErrBadFlag", err)
	}
}

func TestDecoderLimit(t *testing.T) {
	ok := Frame(make([]byte, 10))
	if _, err := decodeAll(10, ok, nil); err != nil {
		t.Fatalf("10 bytes at limit 10: %v", err)
	}
	big := Frame(make([]byte, 11))
	// The limit is enforced on the prefix alone, before the body arrives.
	d := NewDecoder(10)
	err := d.Feed(big[:PrefixLen], func(Message) error { t.Fatal("emitted"); return nil })
	var se *SizeError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &se) || se.Size != 11 || se.Limit != 10 {
		t.Fatalf("err = %v, want SizeError 11 > 10", err)
	}
	// Sticky.
	if err2 := d.Feed([]byte{0}, func(Message) error { return nil }); !errors.Is(err2, ErrTooLarge) {
		t.Fatalf("after error: %v", err2)
	}
	if err3 := d.End(); !errors.Is(err3, ErrTooLarge) {
		t.Fatalf("End after error: %v", err3)
	}
}

func TestDecoderTruncated(t *testing.T) {
	frame := Frame([]byte("hello"))
	for cut := 1; cut < len(frame); cut++ {
		_, err := decodeAll(0, frame[:cut], nil)
		if !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut %d: err = %v, want ErrTruncated", cut, err)
		}
	}
	if _, err := decodeAll(0, nil, nil); err != nil {
		t.Fatalf("empty stream: %v", err)
	}
}

func TestDecoderEmitErrorStops(t *testing.T) {
	stream := AppendFrame(AppendFrame(nil, []byte("a")), []byte("b"))
	stop := errors.New("stop")
	n := 0
	err := NewDecoder(0).Feed(stream, func(Message) error { n++; return stop })
	if err != stop || n != 1 {
		t.Fatalf("err = %v after %d messages", err, n)
	}
}

func TestDecoderAliasesWholeMessages(t *testing.T) {
	chunk := Frame([]byte("abc"))
	var got []byte
	_ = NewDecoder(0).Feed(chunk, func(m Message) error { got = m.Data; return nil })
	if &got[0] != &chunk[PrefixLen] {
		t.Fatal("a message inside one chunk should not be copied")
	}
	if cap(got) != 3 {
		t.Fatalf("aliased data must be capped to the message (cap %d)", cap(got))
	}
}

func ExampleDecoder() {
	stream := AppendFrame(AppendFrame(nil, []byte("first")), []byte("second"))
	d := NewDecoder(1 << 20)
	for _, chunk := range [][]byte{stream[:3], stream[3:12], stream[12:]} {
		_ = d.Feed(chunk, func(m Message) error {
			fmt.Printf("%s\n", m.Data)
			return nil
		})
	}
	fmt.Println(d.End())
	// Output:
	// first
	// second
	// <nil>
}

// FuzzDecoder checks that chunking never changes what is decoded, and that
// re-framing the decoded messages gives back the consumed input.
func FuzzDecoder(f *testing.F) {
	f.Add(Frame([]byte("hello")), uint8(3), uint8(9), int64(0))
	f.Add(AppendFrame(Frame(nil), []byte("x")), uint8(1), uint8(6), int64(1))
	f.Add([]byte{1, 0, 0, 0, 2, 'a', 'b'}, uint8(0), uint8(0), int64(2))
	f.Add([]byte{2, 0, 0, 0, 0}, uint8(2), uint8(2), int64(0))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff}, uint8(4), uint8(4), int64(100))
	f.Fuzz(func(t *testing.T, data []byte, cutA, cutB uint8, limit int64) {
		whole, wholeErr := decodeAll(limit, data, nil)
		split, splitErr := decodeAll(limit, data, []int{int(cutA), int(cutB)})
		if (wholeErr == nil) != (splitErr == nil) {
			t.Fatalf("chunking changed the error: %v vs %v", wholeErr, splitErr)
		}
		if len(whole) != len(split) {
			t.Fatalf("chunking changed the message count: %d vs %d", len(whole), len(split))
		}
		var reframed []byte
		for i := range whole {
			if whole[i].Compressed != split[i].Compressed || !bytes.Equal(whole[i].Data, split[i].Data) {
				t.Fatalf("message %d differs", i)
			}
			if limit > 0 && int64(len(whole[i].Data)) > limit {
				t.Fatalf("message %d of %d bytes exceeds limit %d", i, len(whole[i].Data), limit)
			}
			reframed = AppendFrame(reframed, whole[i].Data)
			if whole[i].Compressed {
				reframed[len(reframed)-len(whole[i].Data)-PrefixLen] = 1
			}
		}
		if !bytes.HasPrefix(data, reframed) {
			t.Fatal("re-framed messages are not a prefix of the input")
		}
		if wholeErr == nil && len(reframed) != len(data) {
			t.Fatalf("clean end but %d of %d bytes consumed", len(reframed), len(data))
		}
	})
}
