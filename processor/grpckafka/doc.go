// Package grpckafka answers calls matched to grpc-kafka routes: fetch
// streams and correlated produce.
//
// Fetch (fetch.go): a server stream of the topic's records, history then
// live until the client cancels, each message carrying its message id in
// the reliability field so the client can resume after it. Produce
// (produce.go): every request message becomes a record, the client's
// half-close a null-value record, and the responder's reply records with the
// call's correlation id become the response, ended by a null-value reply
// carrying the status.
//
// # Fetch streams
//
//   - The request is one empty message (google.protobuf.Empty); anything
//     else is INVALID_ARGUMENT. A client that half-closes without a message
//     is taken as having sent an empty one.
//   - Response headers go out at once, with the metadata of the `meta:*`
//     headers of the first record the stream delivers from history (the
//     stream reads that record before answering; with no history they carry
//     no metadata).
//   - History: a compacted topic's view (cleanup.policy contains compact),
//     else the retained log from the earliest offset; then live records
//     until the client cancels. Tombstones are skipped; filters select.
//   - A topic with a value model (protobuf) sends each record checked and
//     without the registry's framing, decoded once per record by the log
//     tail; records that do not match are left out (counted), and a record
//     whose schema cannot be had ends the stream UNAVAILABLE before it. Its
//     history is the retained log even when compacted: its view holds what
//     HTTP is served.
//   - Each message is the record value plus the reliability field holding
//     the message id: the stream's position after it, that is per partition
//     the next offset it has dispatched up to. The reliability metadata
//     (text, base64 in either alphabet, padded or not, or its -bin form)
//     resumes after such a position; a malformed id is INVALID_ARGUMENT; an
//     empty value counts as absent; a position beyond the end of the log
//     restarts from the earliest offset.
//   - The processor cannot see whether the client reads (Envoy gives ext_proc
//     no flow control); a stream more than limits.stream-lag-budget records
//     behind the topic's tail ends with RESOURCE_EXHAUSTED and the client
//     resumes by id. On drain, streams end with UNAVAILABLE; so do the streams
//     of a topic that gained partitions (the tail reading it is retired): a
//     client resuming by id continues in the partitions its id names, and
//     reads the new ones from their earliest offset.
//
// # Produce calls
//
// Every call shape (unary, client, server and bidi streaming) maps alike:
//
//   - Each request message becomes one record: value = the message without
//     its prefix; key = with.key, or the correlation id; headers = the
//     overrides, then service, method, reply-to and correlation-id (names
//     from options.correlation.headers), then `meta:<name>` for the request
//     metadata (see requestMeta). The client's half-close becomes one
//     null-value record with the same key and headers, and so does a client
//     that goes away mid-call once something was written (best effort), so
//     the responder knows the request ended.
//   - Correlation id: `<idempotency-key metadata, or a UUID>-<hex md5>` of the
//     service, method and reply-to headers (name and value), the override
//     values and the identities of the route's guards (by guard name) — the
//     digest Zilla computes plus the identity, so two callers never share a
//     reply. The payload is not part of it: an idempotency key names the
//     call.
//   - Replies: reply records with the correlation id, from the cluster's reply
//     index, watched before anything is produced. Each record with a value is
//     one response message (the first one's `meta:*` headers are the response
//     metadata, request-only names left out: route.RequestOnly); a
//     null-value record ends the call with the status header
//     (options.correlation.headers.status, default gateway:status; OK when
//     absent, as a responder that only writes successes would) and the
//     message header, its `meta:*` headers as trailers.
//   - Replay: with an idempotency key, the call claims its key (kafkaroute.
//     Claim: the key index read up to the topic's end, through any replica;
//     one call per key at a time on this replica) and the reply index is
//     caught up. A key that names a call with another correlation id is
//     refused at once (FAILED_PRECONDITION). Otherwise the call reads its
//     messages against the records in the log (keyCheck: each record carries
//     the fingerprint of the call up to it), writes none of them again and
//     relays no reply before they match; one that differs, or ends before
//     them, is refused (FAILED_PRECONDITION) and writes nothing. A call whose
//     request ended in the log is then a replay of its replies; one whose
//     first messages only are in the log writes the ones after them. Records
//     without fingerprints (written before them) attach as they did: a call
//     that ended there, or has stored replies, relays them. Past
//     limits.idempotency-window: FAILED_PRECONDITION.
//     Stored replies the reply index evicted (limits.reply-index-bytes)
//     are read back from their topic, and the call attaches to them once
//     back (readBackStatus): FAILED_PRECONDITION (expired) when the topic
//     no longer holds them, UNAVAILABLE when Kafka does not answer within
//     limits.kafka-timeout; nothing is written again either way.
//   - Timeouts: grpc-timeout bounds the call (the exchange answers
//     DEADLINE_EXCEEDED). limits.reply-timeout bounds the silence while the
//     call waits for its responder: it runs from each request record (and
//     the half-close) and restarts at each reply; after a reply it stops
//     until the client sends again, unless the client has half-closed, so a
//     bidi stream may idle between exchanges. Elapsed: DEADLINE_EXCEEDED.
//   - Oneway (no reply-to): records carry the overrides and `meta:*` only
//     (and the correlation id, `<key>-<hex md5>` as above without reply-to,
//     when the call has an idempotency key), key = with.key (or none), no
//     terminal record; once every record is acknowledged, one empty message
//     and OK. A keyed call writes only the messages after those the log
//     holds of its correlation id, once they match, one call per key at a
//     time per replica; without an end record, a retry that adds messages to
//     a complete call is taken as resuming it.
//
// Errors: a record not enqueued, or not acknowledged within
// limits.kafka-timeout, is UNAVAILABLE (an idempotency key makes the retry
// safe); a broker rejection is RESOURCE_EXHAUSTED (too large),
// PERMISSION_DENIED (ACL) or INTERNAL, with the broker's reason.
package grpckafka
