package kafkaroute

import (
	"context"
	"errors"
	"fmt"
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
//
// Two requests with the same key reaching two replicas at the same instant
// can both write: neither's record is in the log when the other claims. A
// retry, which comes after an answer or a timeout, cannot.

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

// Claim says what the log holds of the correlation id cid in topic, after
// reading the key index up to the topic's end (bounded by kafkaTimeout).
// Call it while leading the id's flight, and write only the records after
// claim.Records. An id past the window is an *ExpiredError; an index that
// cannot read the topic wraps client.ErrNotReady (nothing was written: a
// retry is safe).
func Claim(ctx context.Context, kr *Route, topic, cid string, kafkaTimeout time.Duration) (writtenids.State, error) {
	keys, err := kr.Cluster.WrittenIDs()
	if err != nil {
		return writtenids.State{}, fmt.Errorf("%w: %w", client.ErrNotReady, err)
	}
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	if err := keys.Sync(ctx, topic, kr.CorrelationHeader); err != nil {
		if errors.Is(err, client.ErrUnknownTopic) {
			// The request topic is missing: answered as a write to it
			// would be (404 for a templated topic), not as an index
			// that is not ready.
			return writtenids.State{}, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
		}
		return writtenids.State{}, err
	}
	st := keys.Lookup(topic, cid)
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
