// Package e2e holds the end-to-end tests: real HTTP/1.1, h2c and grpc-go
// clients → the Envoy emulator (following envoy/envoy.yaml) → the processor
// over ext_proc → librdkafka → the embedded broker, with assertions on what
// clients see and on the records read back from Kafka.
//
// Every test starts its own stack (broker, processor, emulator) on ports of
// its own, so tests run in parallel: they spend most of their time waiting
// on Kafka and on the timeouts they exercise, not on the CPU. A test stays
// serial, and says why in a "Serial:" comment, when it measures the process
// as a whole (goroutines, allocations, exported series) or checks a time
// budget that other tests' load would spend. A new test calls t.Parallel()
// unless one of those holds.
package e2e
