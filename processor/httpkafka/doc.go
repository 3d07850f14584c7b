// Package httpkafka answers requests matched to http-kafka routes: fetch
// from views of compacted topics, and produce with correlated replies.
//
// # Produce routes
//
// A route without reply-to is oneway: the request becomes one record
// (value = body, key from with.key, headers = content-type and the
// overrides; DELETE writes a tombstone) and, once the broker acknowledged it
// under the route's acks, the answer is 204 No Content — as Zilla answers,
// and because for the CRUD shape (a compacted topic read and written by key)
// the write is the whole effect. With acks: none the broker sends nothing back,
// so there 204 means "handed to the broker". A request with an idempotency
// key also carries its correlation id (onewayCorrelation) and is written
// only if the log holds no record with it (kafkaroute.Claim): its retry,
// through any replica, answers 204 again without writing.
//
// A route with reply-to is request-reply: the record carries the request
// headers, reply-to and a correlation id (see correlation), and the answer
// is built from the first reply record with that id (replyResponse):
//
//  1. The request joins the flight of its correlation id on this replica
//     (a replay of a request in flight attaches to it).
//  2. The flight's lead registers a reply watch, waits until the reply
//     index has caught up, and, for a request with an idempotency key,
//     claims the id (kafkaroute.Claim): a request record already in the log
//     or a stored reply is a replay, and nothing is produced. Otherwise it
//     produces. Past limits.idempotency-window the answer is 410.
//  3. `prefer: respond-async` on a route with async answers 202 with every
//     async entry as a header once the record is acknowledged; with
//     `wait=N` it first waits up to N s (at most limits.max-wait) for the
//     reply. respond-async on a route without async is ignored. Without it
//     the request waits limits.reply-timeout for the reply (`prefer: wait`
//     does not change that), then gets 202 + location on a route with
//     async, 504 otherwise.
//
// A GET matching a condition with {correlationId} of a route with reply-to
// and async is a follow-up: it reads the reply index and never produces —
// the stored reply, or with `prefer: wait=N` the reply when it comes, else
// 202 + the same location. A follow-up must come from the identity the
// original request had (the correlation id says whose it is), else 404.
//
// A stored reply the reply index evicted for limits.reply-index-bytes is
// still stored: a replay or a follow-up of it waits for the index to read
// it back from its topic (replies.Watch.Evicted), which ends within
// limits.kafka-timeout, and is answered from it as from a reply held in
// memory (readBackWait, readBackFailure). The topic no longer holding it
// answers 410 (its result expired); Kafka not answering, 503 (nothing was
// written again; a retry reads again).
//
// Every wait ends when the client goes away; on drain, requests waiting on
// a route with async are answered 202 + location.
package httpkafka
