// Package e2e holds the end-to-end tests: real HTTP/1.1, h2c and grpc-go
// clients → the Envoy emulator (following envoy/envoy.yaml) → the processor
// over ext_proc → librdkafka → the embedded broker, with assertions on what
// clients see and on the records read back from Kafka.
package e2e
