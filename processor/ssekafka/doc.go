// Package ssekafka is the sse-kafka binding: a topic followed by a browser
// as a Server-Sent Events stream (text/event-stream), answered through
// Envoy with a StreamedImmediateResponse as gRPC fetch streams are.
//
// It reads what gRPC fetch streams read (kafkaio/logtails): the topic's
// current records first when it is compacted (from its view), else the log
// from the resume position, then the live ring. Only the framing differs:
// each record is an event whose id is the stream's position across every
// partition, encoded as a gRPC message id is, so a reconnect with
// last-event-id (which EventSource sends by itself) resumes after it on any
// replica, with nothing skipped and nothing repeated.
//
// What a stream sends:
//
//	retry: <limits.sse-retry in ms>      once, first
//	id: <position>                       per record
//	data: <value line>                   one per line of the value
//	event: delete                        before the id, for a tombstone (data: the key)
//	: <comment>                          heartbeats, and why the stream ends
//
// A busy stream's sends are paced as a gRPC fetch stream's are
// (limits.stream-send-interval, stream-send-rate, over the open event
// streams): events that arrive close together go out in one message.
//
// The stream ends with the drain, when it falls more than
// limits.stream-lag-budget records behind, and when its topic gains
// partitions; each end says why in a comment, and the browser reconnects
// with last-event-id by itself.
package ssekafka
