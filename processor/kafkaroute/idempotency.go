package kafkaroute

import (
	"crypto/rand"
	"errors"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// MaxIdempotencyKey bounds an idempotency key: it starts the correlation id,
// which travels in record headers and in async locations.
const MaxIdempotencyKey = 128

// Why an idempotency key is refused.
var (
	ErrRepeatedKey  = errors.New("more than one idempotency key")
	ErrMalformedKey = errors.New("malformed idempotency key")
)

// UUIDs issues the random (version 4, RFC 9562) UUIDs that stand for a
// missing idempotency key. Every request-reply without a key needs one, so
// the random bytes are read from crypto/rand a batch at a time rather than
// once per UUID, and each UUID is the only allocation. The bytes are as
// unpredictable as crypto/rand's: a batch never leaves this value, is used
// by one goroutine at a time, and each of its bytes is handed out once and
// then cleared. The batches are the handler's own, not the uuid package's
// global pool.
//
// The zero value is ready to use; it is safe for concurrent use.
type UUIDs struct {
	// batches holds *uuidBatch: one per processor under load, so
	// concurrent requests do not queue on one lock.
	batches sync.Pool
}

type uuidBatch struct {
	left int // unread bytes at the end of buf
	buf  [uuidsPerBatch * 16]byte
}

// uuidsPerBatch is how many UUIDs one read from crypto/rand serves.
const uuidsPerBatch = 32

// NewString returns a new random UUID in its 36-character form.
func (u *UUIDs) NewString() string {
	b, _ := u.batches.Get().(*uuidBatch)
	if b == nil {
		b = new(uuidBatch)
	}
	id := b.next()
	u.batches.Put(b)
	return id.String()
}

// next takes the next 16 bytes of the batch, reading a new one when it is
// used up, and makes them a version 4 UUID.
func (b *uuidBatch) next() (id uuid.UUID) {
	if b.left < len(id) {
		// crypto/rand.Read does not fail: it crashes the program first.
		_, _ = rand.Read(b.buf[:])
		b.left = len(b.buf)
	}
	from := b.buf[len(b.buf)-b.left:][:len(id)]
	copy(id[:], from)
	clear(from)
	b.left -= len(id)
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80 // variant 10
	return id
}

// IdempotencyKey reads the values of the idempotency header (or metadata):
// none gets a UUID from u that stands for it (given false); more than one
// is ErrRepeatedKey; one that is not ValidIdempotencyKey is ErrMalformedKey.
func (u *UUIDs) IdempotencyKey(values []string) (key string, given bool, err error) {
	return idempotencyKey(values, u.NewString)
}

// IdempotencyKey is UUIDs.IdempotencyKey with a UUID read from crypto/rand
// on its own: for a gRPC produce call, which stands for a stream of records
// and needs one UUID for all of them.
func IdempotencyKey(values []string) (key string, given bool, err error) {
	return idempotencyKey(values, uuid.NewString)
}

func idempotencyKey(values []string, newUUID func() string) (key string, given bool, err error) {
	switch {
	case len(values) == 0:
		return newUUID(), false, nil
	case len(values) > 1:
		return "", false, ErrRepeatedKey
	case !ValidIdempotencyKey(values[0]):
		return "", false, ErrMalformedKey
	}
	return values[0], true, nil
}

// ValidIdempotencyKey: 1–128 characters of [A-Za-z0-9._~-] (URL-unreserved,
// so a correlation id is safe in a location without escaping).
func ValidIdempotencyKey(k string) bool {
	if k == "" || len(k) > MaxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-') {
			return false
		}
	}
	return true
}

// VolatileHeader reports forwarded headers (gRPC: metadata) left out of a
// request's correlation id and fingerprint: a client's retry, or the same
// request through another Envoy, carries other values, and must still be
// recognised as the same request, not refused as another one under its key.
// They are what Envoy and proxies set per attempt: the request id, the
// forwarding headers, and the trace context of every tracer Envoy has
// (W3C, Zipkin's b3 and x-b3-*, Datadog, AWS X-Ray, OpenCensus,
// SkyWalking, Lightstep, Jaeger).
func VolatileHeader(name string) bool {
	switch name {
	case "x-request-id", "user-agent", "traceparent", "tracestate", "b3",
		"x-amzn-trace-id", "x-cloud-trace-context", "grpc-trace-bin", "sw8", "x-ot-span-context", "uber-trace-id":
		return true
	}
	return strings.HasPrefix(name, "x-b3-") || strings.HasPrefix(name, "x-forwarded-") || strings.HasPrefix(name, "x-datadog-")
}
