package grpckafka

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// whatCall is what a call under a reused idempotency key may differ in, as
// its fingerprint covers it.
const whatCall = "its service, method, metadata or messages"

// keyCheck follows a call with an idempotency key against what its key
// holds in the log (rule 5 of kafkaroute's write rule). A call's
// fingerprint grows with it: each record carries the fingerprint of the
// call up to that record (the messages before it, then its own message or
// the end), so a retry compares itself with the log one message at a time
// and needs only the last record's fingerprint to know the whole prefix
// matches. The first logged records are not written again; the retry is
// refused if its message (or its end) at the last of them does not match,
// or if it ends before it reaches them.
//
// A call without a key has a nil *keyCheck, on which every method says
// "write it" and nothing else.
type keyCheck struct {
	use    *kafkaroute.KeyUse
	header string   // the fingerprint header's name
	sum    [16]byte // the fingerprint up to the last message seen
	seen   int      // messages seen, the end counting as one
	logged int      // records of the call in the log
	want   string   // the fingerprint of the last of them; "" unknown
	ended  bool     // the log holds the call's end
	topic  string
	first  time.Time // when the call's first record was written
}

// newKeyCheck starts the fingerprint of a call from what its records carry
// besides its messages: service, method, reply-to, the overrides, the
// record key and the metadata, less the volatile entries a retry through
// Envoy carries with other values (kafkaroute.VolatileHeader).
func newKeyCheck(use *kafkaroute.KeyUse, header string, call []string, overrides []client.Header, key []byte, meta route.Headers) *keyCheck {
	k := &keyCheck{use: use, header: header}
	h := sha256.New()
	field := func(b []byte) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	field([]byte("kafka-ext-proc grpc call"))
	for _, s := range call {
		field([]byte(s))
	}
	for _, o := range overrides {
		field([]byte(o.Key))
		field(o.Value)
	}
	field(key)
	for _, m := range meta {
		if forwardedMeta(m.Name) && !kafkaroute.VolatileHeader(m.Name) {
			field([]byte(m.Name))
			field([]byte(m.Value))
		}
	}
	copy(k.sum[:], h.Sum(nil))
	return k
}

// expect sets what the log holds of the call's correlation id.
func (k *keyCheck) expect(topic string, logged int, want string, ended bool, first time.Time) {
	k.topic, k.logged, k.want, k.ended, k.first = topic, logged, want, ended, first
}

// next takes the call's next message (nil: its end): write says whether its
// record is to be written; an error says the call is not the one the log
// holds (a *kafkaroute.KeyReusedError). verified tells whether this message
// completed the check of the logged prefix.
func (k *keyCheck) next(msg []byte) (write, verified bool, err error) {
	if k == nil {
		return true, false, nil
	}
	h := sha256.New()
	h.Write(k.sum[:])
	if msg == nil {
		h.Write([]byte{'e'})
	} else {
		var n [binary.MaxVarintLen64]byte
		h.Write([]byte{'m'})
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(msg)))])
		h.Write(msg)
	}
	copy(k.sum[:], h.Sum(nil))
	k.seen++
	switch {
	case k.seen > k.logged:
		return true, false, nil
	case k.want == "":
		// Written without fingerprints (before they existed): the prefix
		// is taken as the same call, as it was then.
		return false, k.seen == k.logged, nil
	case k.seen == k.logged && hex.EncodeToString(k.sum[:]) != k.want,
		msg == nil && k.seen < k.logged: // it ends before the logged call did
		return false, false, k.reused()
	}
	return false, k.seen == k.logged, nil
}

// end checks the end of a call that writes no end record (oneway): one
// that ends before the logged call did is another call.
func (k *keyCheck) end() error {
	if k == nil || k.want == "" || k.seen >= k.logged {
		return nil
	}
	return k.reused()
}

func (k *keyCheck) reused() error {
	return &kafkaroute.KeyReusedError{Key: k.use.Key, Topic: k.topic, First: k.first, What: whatCall}
}

// verified tells whether the call matched every logged record (or there
// are none).
func (k *keyCheck) verified() bool { return k == nil || k.seen >= k.logged }

// resuming tells whether the log holds records of the call but not its
// end: if this call stops after they were matched, its end is still owed.
func (k *keyCheck) resuming() bool { return k != nil && k.logged > 0 && !k.ended }

// headers appends the fingerprint header of the record of the last message
// (or end) seen to hs, in a slice of its own.
func (k *keyCheck) headers(hs []client.Header) []client.Header {
	if k == nil {
		return hs
	}
	return append(hs[:len(hs):len(hs)], client.Header{Key: k.header, Value: k.use.Header(hex.EncodeToString(k.sum[:]))})
}
