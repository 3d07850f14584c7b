package kafkaroute

import (
	"sync"
	"testing"

	"github.com/google/uuid"
)

// The UUIDs standing for missing idempotency keys are version 4 RFC 9562
// UUIDs, and never repeat, from many goroutines at once and across many
// refills of the batch.
func TestUUIDsAreRandomV4(t *testing.T) {
	var u UUIDs
	const goroutines, each = 8, 20 * uuidsPerBatch
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range ids {
		wg.Go(func() {
			for range each {
				ids[g] = append(ids[g], u.NewString())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for _, some := range ids {
		for _, s := range some {
			id, err := uuid.Parse(s)
			switch {
			case err != nil || len(s) != 36:
				t.Fatalf("%q: %v", s, err)
			case id.Version() != 4 || id.Variant() != uuid.RFC4122:
				t.Fatalf("%s: version %v, variant %v", s, id.Version(), id.Variant())
			case seen[s]:
				t.Fatalf("%s issued twice", s)
			}
			seen[s] = true
		}
	}
	// Every byte handed out is cleared from its batch: what is left of it
	// is the unread part only.
	var b uuidBatch
	first, second := b.next(), b.next()
	if n := len(b.buf) - 2*16; b.left != n || first == second {
		t.Fatalf("%d bytes left of a new batch after two UUIDs (%s, %s), want %d", b.left, first, second, n)
	}
	for i, c := range b.buf[:len(b.buf)-b.left] {
		if c != 0 {
			t.Fatalf("byte %d of the batch was handed out and kept", i)
		}
	}
	for range uuidsPerBatch - 2 {
		b.next()
	}
	if b.left != 0 || b.next() == first || b.left != len(b.buf)-16 {
		t.Fatalf("a used-up batch was not read again: %d bytes left", b.left)
	}
}

// Without the header a key is issued; with one it is the key; a repeated or
// malformed one is refused, by the buffered source as by the plain one.
func TestIdempotencyKeyFromHeader(t *testing.T) {
	var u UUIDs
	for name, f := range map[string]func([]string) (string, bool, error){
		"buffered": u.IdempotencyKey, "crypto/rand": IdempotencyKey,
	} {
		if k, given, err := f(nil); err != nil || given || uuid.Validate(k) != nil {
			t.Errorf("%s, no header: %q %v %v", name, k, given, err)
		}
		if k, given, err := f([]string{"k-1"}); err != nil || !given || k != "k-1" {
			t.Errorf("%s, one header: %q %v %v", name, k, given, err)
		}
		if _, _, err := f([]string{"a", "b"}); err != ErrRepeatedKey {
			t.Errorf("%s, two headers: %v", name, err)
		}
		if _, _, err := f([]string{"a b"}); err != ErrMalformedKey {
			t.Errorf("%s, malformed: %v", name, err)
		}
	}
}

// BenchmarkUUID compares the buffered source with one read from crypto/rand
// per UUID (uuid.NewString).
func BenchmarkUUID(b *testing.B) {
	b.Run("buffered", func(b *testing.B) {
		var u UUIDs
		b.ReportAllocs()
		for b.Loop() {
			_ = u.NewString()
		}
	})
	b.Run("uuid.NewString", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = uuid.NewString()
		}
	})
	b.Run("buffered/parallel", func(b *testing.B) {
		var u UUIDs
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = u.NewString()
			}
		})
	})
	b.Run("uuid.NewString/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = uuid.NewString()
			}
		})
	})
}
