package kafkaroute

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/writtenids"
)

// The write rule of a request with an idempotency key, for every produce
// shape of both bindings:
//
//  1. Its records carry its correlation id (oneway ones too; records of
//     requests without a key stay as they are).
//  2. Only one request per correlation id writes at a time on a replica
//     (Flights.Lead, or a request-reply flight's lead).
//  3. The writer claims the id (Claim): the cluster's key index reads the
//     request topic up to its end, so it has seen every record acknowledged
//     by any replica before, and says how many records with the id are in
//     the log. The writer writes only the records after those: none for a
//     oneway request or HTTP request already written, the rest of a gRPC
//     stream's messages.
//  4. Within limits.idempotency-window of its first record an id answers as
//     the original request did; after it, until twice it, Claim refuses
//     with an *ExpiredError (410 / FAILED_PRECONDITION) and nothing is
//     written; after twice it the id is forgotten, and a request with it is
//     new.
//  5. A key names one request of one caller on one request topic. Its
//     records carry, in the fingerprint header, "<use>.<fingerprint>":
//     the key's use (KeySlot: the key and the caller's identities) and the
//     request's fingerprint (for a gRPC call, of the messages up to that
//     record). The index keeps, per use, the first id written under it, so
//     every replica reads the same answer. A request whose use is held by
//     another correlation id, or whose fingerprint differs from the one in
//     the log, is refused with a *KeyReusedError (422 /
//     FAILED_PRECONDITION) and nothing is written: answering it with the
//     first request's reply would tell the client its own request was done.
//     On one replica the writes under one use run one at a time (Flights.Lead
//     on UseFlight), so two different requests with one key cannot both
//     write there.
//
// Two requests with the same key reaching two replicas at the same instant
// can both write: neither's record is in the log when the other claims. A
// retry, which comes after an answer or a timeout, cannot. The log's order
// then decides which one the key names.

// ExpiredError is a request whose correlation id was first written longer
// than the idempotency window ago.
type ExpiredError struct {
	CID    string
	First  time.Time     // when its first record was written
	Window time.Duration // limits.idempotency-window
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("this request (correlation id %s) was first written at %s, more than limits.idempotency-window (%v) ago: its result expired and it was not written again; send it with a new idempotency key to write it anew",
		e.CID, e.First.UTC().Format(time.RFC3339), e.Window)
}

// KeyReusedError is a request whose idempotency key already names another
// request of the same caller on the same topic (rule 5).
type KeyReusedError struct {
	Key   string
	Topic string
	First time.Time // when the key's first record was written
	// What says, in general terms, what may differ ("its method, path,
	// …"): the processor keeps a hash of the first request, not the
	// request, so it cannot say which part.
	What string
}

func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("idempotency key %q was used at %s for another request to topic %q; this one differs in %s. Nothing was written: repeat the first request unchanged to get its answer, or send this one with a new idempotency key",
		e.Key, e.First.UTC().Format(time.RFC3339), e.Topic, e.What)
}

// KeyUse is a request's use of its idempotency key (rule 5).
type KeyUse struct {
	Key  string // the idempotency key, for errors
	Slot string // KeySlot(Key, the caller's identities)
	// Fingerprint is the whole request's, when it is known before anything
	// is written (HTTP); "" for a gRPC call, whose messages are compared
	// one at a time as they come (the binding compares them).
	Fingerprint string
	What        string // what another request may differ in, for the error
}

// Header is the fingerprint header's value for a record whose request's
// fingerprint (up to this record) is fp.
func (u *KeyUse) Header(fp string) []byte {
	b := make([]byte, 0, len(u.Slot)+1+len(fp))
	b = append(b, u.Slot...)
	b = append(b, '.')
	return append(b, fp...)
}

// UseFlight is the flight a replica's writes under one key's use hold one
// at a time (Flights.Lead): two different requests with the same key must
// not both claim before either wrote.
func UseFlight(cluster, topic string, u *KeyUse) FlightKey {
	// A use is hex and a correlation id has a '-': the two never meet.
	return FlightKey{Cluster: cluster, Topic: topic, CID: u.Slot}
}

// KeySlot names a key's use: 32 hex digits of SHA-256 over the key and the
// caller's guard identities, so two callers never share a key (nor learn
// that the other used it) and the record carries no key in clear twice.
func KeySlot(key string, identities map[string]string) string {
	h := sha256.New()
	field := func(s string) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	field("kafka-ext-proc idempotency key")
	field(key)
	guards := make([]string, 0, len(identities))
	for g := range identities {
		guards = append(guards, g)
	}
	slices.Sort(guards)
	for _, g := range guards {
		field(g)
		field(identities[g])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Claim says what the log holds of the correlation id cid in topic, after
// reading the key index up to the topic's end (bounded by kafkaTimeout).
// Call it while leading the id's flight, and write only the records after
// claim.Records. use is the request's key use (nil: the id alone is looked
// up, as a follow-up does). A key that names another request is a
// *KeyReusedError; an id past the window is an *ExpiredError; an index that
// cannot read the topic wraps client.ErrNotReady (nothing was written: a
// retry is safe).
func Claim(ctx context.Context, kr *Route, topic, cid string, use *KeyUse, kafkaTimeout time.Duration) (writtenids.State, error) {
	keys, err := kr.Cluster.WrittenIDs()
	if err != nil {
		return writtenids.State{}, fmt.Errorf("%w: %w", client.ErrNotReady, err)
	}
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	if err := keys.Sync(ctx, topic, kr.CorrelationHeader, kr.FingerprintHeader); err != nil {
		if errors.Is(err, client.ErrUnknownTopic) {
			// The request topic is missing: answered as a write to it
			// would be (404 for a templated topic), not as an index
			// that is not ready.
			return writtenids.State{}, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
		}
		return writtenids.State{}, err
	}
	var st writtenids.State
	if use == nil {
		st = keys.Lookup(topic, cid)
	} else {
		st = keys.LookupKey(topic, use.Slot, cid)
		if st.Written() && (st.CID != cid || use.Fingerprint != "" && st.Fingerprint != "" && st.Fingerprint != use.Fingerprint) {
			return st, &KeyReusedError{Key: use.Key, Topic: topic, First: st.First, What: use.What}
		}
	}
	if st.Expired {
		return st, &ExpiredError{CID: cid, First: st.First, Window: keys.Window()}
	}
	return st, nil
}

// RetryHint is what a failure's detail says about a retry, which depends
// on whether the request carried an idempotency key. Every 503/504 and
// UNAVAILABLE of a produce route says it.
type RetryHint struct {
	Name string // the binding's idempotency header (or metadata)
	// Kind, when set, follows Name in the advice ("header"): kept apart so
	// that a request does not build the phrase it rarely needs.
	Kind  string
	Given bool // the request carried one
}

// what is the idempotency header (or metadata) as the advice names it.
func (r RetryHint) what() string {
	if r.Kind == "" {
		return r.Name
	}
	return r.Name + " " + r.Kind
}

// UnknownOutcome is the advice for a request that may or may not have been
// written (in part, for a stream).
func (r RetryHint) UnknownOutcome() string {
	if r.Given {
		return "a retry with the same " + r.what() + " writes nothing already written and answers as this request would have"
	}
	return "this request has no " + r.what() + ", so a retry may write it a second time (send one to make a retry safe)"
}
