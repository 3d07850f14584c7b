// Package client holds what every reader and writer of a kafka binding is
// built from: the librdkafka properties the processor sets or drops
// (Properties, the one table of them: the configuration functions are
// tested against it and docs/kafka.md shows it), creating consumers,
// librdkafka's log lines into slog, statistics (RdStats), and the record,
// header, readiness and errors the packages beside it share.
package client
