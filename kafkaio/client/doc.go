// Package client holds what every reader and writer of a kafka binding is
// built from: the librdkafka properties the processor sets, creating
// consumers, librdkafka's log lines into slog, statistics
// (RdStats), and the record, header, readiness and errors the packages
// beside it share.
package client
