// Package kafkaio is everything that touches librdkafka, and its entry
// point: a Cluster owns every reader and writer of one kafka binding. They
// live in the packages below it, each with one job:
//
//   - client: what every client is built from (the librdkafka properties the
//     processor sets, in one table; consumers, logs, statistics; the record
//     type and the errors the others share);
//   - follow: one assign-only reader of a set of topics from chosen offsets,
//     with positions, a catch-up signal and added partitions followed;
//   - replies: the reply index (reply records by correlation id);
//   - writtenids: the correlation ids written to request topics, which
//     requests with an idempotency key check;
//   - views: views of compacted topics;
//   - logtails: what gRPC fetch streams read (history, then a live ring);
//   - produce: the producers.
//
// CheckConnection says why a binding cannot connect. Nothing here knows of
// HTTP, gRPC or Envoy.
package kafkaio
