package client

import (
	"maps"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// DefaultKafkaTimeout bounds Kafka calls of a client given no KafkaTimeout.
// The processor always passes its limits.kafka-timeout; this serves callers
// of the package on their own (the responder, tests).
const DefaultKafkaTimeout = 5 * time.Second

// Config is the configuration every client starts from: the binding's
// properties with the settings of Properties for every client. The
// binding's other properties pass through.
func Config(props map[string]string, kafkaTimeout time.Duration) *kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range props {
		cm[k] = v
	}
	// Producers default to creating topics on metadata requests; a request must
	// never create a topic.
	cm["allow.auto.create.topics"] = false
	ms := int(kafkaTimeout / time.Millisecond)
	if ms <= 0 {
		ms = int(DefaultKafkaTimeout / time.Millisecond)
	}
	cm["topic.metadata.propagation.max.ms"] = ms
	// Brokers log and quota by client id; librdkafka's default is "rdkafka".
	if _, ok := props["client.id"]; !ok {
		cm["client.id"] = DefaultClientID()
	}
	// librdkafka logs go through one channel per client into slog.
	cm["go.logs.channel.enable"] = true
	if _, ok := props["log_level"]; !ok {
		cm["log_level"] = 4 // warnings and worse
	}
	// librdkafka's reconnect backoff grows to 10 s while a broker is down,
	// and a producer's records time out only when its broker threads wake:
	// a record that never left was reported up to 6 s late, after the
	// answer had to go out as "may or may not have been written" (504)
	// rather than "not written, retry" (503). At 1 s a record's timeout is
	// reported within about a second of it, and a broker that comes back is
	// found within a second.
	if _, ok := props["reconnect.backoff.max.ms"]; !ok {
		cm["reconnect.backoff.max.ms"] = 1000
	}
	// Statistics feed the metrics (broker round trips, queues, lag); each
	// client folds them in where it reads its events.
	if _, ok := props["statistics.interval.ms"]; !ok {
		cm["statistics.interval.ms"] = int(DefaultStatisticsInterval / time.Millisecond)
	}
	return &cm
}

// WithoutStatistics is for short-lived clients: nobody reads their
// statistics.
func WithoutStatistics(cm *kafka.ConfigMap) *kafka.ConfigMap {
	(*cm)["statistics.interval.ms"] = 0
	return cm
}

// ConsumerConfig is for assignment-only consumers: a per-replica group id is
// required by the Go client, but the group is never joined and nothing is
// committed.
func ConsumerConfig(props map[string]string, kafkaTimeout time.Duration, groupID string) *kafka.ConfigMap {
	cm := Config(props, kafkaTimeout)
	(*cm)["group.id"] = groupID
	(*cm)["enable.auto.commit"] = false
	(*cm)["enable.auto.offset.store"] = false
	(*cm)["enable.partition.eof"] = true
	(*cm)["auto.offset.reset"] = "earliest"
	// Wake-ups travel on the live consumer: keep its fetch wait short so an
	// idle broker answers quickly after a write.
	if _, ok := props["fetch.wait.max.ms"]; !ok {
		(*cm)["fetch.wait.max.ms"] = 100
	}
	return cm
}

// LookupConfig is the configuration of a client that only looks things up
// (metadata, offsets): a producer that never produces. Nobody reads its
// statistics (its look-ups are a request each), and its channels are
// allocated small, as a producer's are: its events are only errors, which
// NewLookupClient discards (its log lines say them).
func LookupConfig(props map[string]string, kafkaTimeout time.Duration) *kafka.ConfigMap {
	cm := WithoutStatistics(Config(props, kafkaTimeout))
	(*cm)["go.delivery.reports"] = false
	(*cm)["go.events.channel.size"] = 4096
	(*cm)["go.produce.channel.size"] = 1
	return cm
}

// MessageTimeout is librdkafka's message.timeout.ms for a Kafka timeout:
// librdkafka scans for timed-out records and requests once a second, so
// the record's own timeout is set early enough for its failure (which says
// whether it was sent: a 503, safe to retry, rather than a 504) to arrive
// before Produce stops waiting. Reports were seen up to 1.2 s after the
// record's timeout, hence 2 s of margin.
func MessageTimeout(kafkaTimeout time.Duration) time.Duration {
	return max(kafkaTimeout-2*time.Second, kafkaTimeout/3, time.Millisecond)
}

// ProducerConfig is the configuration of a producer of acks mode acks:
// the binding's properties with the settings a producer owns (see
// Properties); maxRecordBytes raises message.max.bytes (0 leaves it).
func ProducerConfig(userProps map[string]string, kafkaTimeout time.Duration, acks Acks, maxRecordBytes int) *kafka.ConfigMap {
	props := make(map[string]string, len(userProps))
	for k, v := range userProps {
		props[k] = v
	}
	// Settings we own, and their aliases: a map has no order, so an alias
	// left in would win or lose at random.
	for _, k := range []string{
		"acks", "request.required.acks", "enable.idempotence", "transactional.id",
		"retries", "message.send.max.retries",
		"max.in.flight", "max.in.flight.requests.per.connection",
		"message.timeout.ms", "delivery.timeout.ms",
		"go.delivery.reports", "go.delivery.report.fields", "delivery.report.only.error",
		"go.batch.producer", "go.events.channel.size", "go.produce.channel.size",
	} {
		delete(props, k)
	}
	cm := Config(props, kafkaTimeout)
	switch acks {
	case AcksNone:
		(*cm)["acks"] = "0"
	case AcksLeader:
		(*cm)["acks"] = "1"
	case AcksAll:
		(*cm)["acks"] = "all"
		(*cm)["enable.idempotence"] = true
	}
	mt := int(MessageTimeout(kafkaTimeout) / time.Millisecond)
	rt := mt
	if acks == AcksAll {
		// A produce request times out with its first record unless
		// socket.timeout.ms is shorter (rd_kafka_ProduceRequest), so the
		// idempotent producer, which may re-send, gets a request timeout
		// of a third of the record's: one re-send then fits before the
		// record's own timeout (librdkafka scans for both once a second).
		rt = max(mt/3, 1)
		if v, err := strconv.Atoi(props["socket.timeout.ms"]); err != nil || v > rt {
			(*cm)["socket.timeout.ms"] = rt
		}
	} else {
		// Never re-send a batch that may be in the log: without the
		// idempotent producer's sequence numbers the broker would write it
		// twice.
		(*cm)["message.send.max.retries"] = 0
		(*cm)["max.in.flight.requests.per.connection"] = 1
	}
	(*cm)["message.timeout.ms"] = mt
	if v, err := strconv.Atoi(props["request.timeout.ms"]); err != nil || v > rt {
		(*cm)["request.timeout.ms"] = rt
	}
	_, lingerSet := props["linger.ms"]
	_, bufSet := props["queue.buffering.max.ms"]
	if !lingerSet && !bufSet {
		// Every request waits for its record's acknowledgement, so it pays
		// linger.ms in full.
		(*cm)["linger.ms"] = 1
	}
	if _, ok := props["partitioner"]; !ok {
		(*cm)["partitioner"] = "murmur2_random"
	}
	if mb := RecordLimit(props, maxRecordBytes); mb > 0 {
		(*cm)["message.max.bytes"] = mb
	}
	(*cm)["go.delivery.report.fields"] = "none"
	// The Go client allocates these channels at their full size (1e6 slots
	// by default); Events carries only errors and statistics (each record's
	// report goes to its own channel), and ProduceChannel is unused.
	(*cm)["go.events.channel.size"] = 4096
	(*cm)["go.produce.channel.size"] = 1
	return cm
}

// librdkafka's bounds of message.max.bytes.
const (
	DefaultMessageMaxBytes = 1000000
	MaxMessageMaxBytes     = 1000000000
)

// RecordLimit is the message.max.bytes a producer runs with: the user's
// value, raised to want (within librdkafka's maximum); 0 when neither is
// set (librdkafka's default applies).
func RecordLimit(props map[string]string, want int) int {
	user, _ := strconv.Atoi(props["message.max.bytes"])
	return min(max(user, want), MaxMessageMaxBytes)
}

// liveFetchWait is the live consumer's fetch.wait.max.ms unless the binding
// sets one. The live consumer reads every partition of every view, so each
// fetch the broker answers empty costs it (and the broker) work in
// proportion to the views: at the consumers' 100 ms, 1,000 quiet views cost
// an eighth of a core. A longer wait does not delay wake-ups: with
// fetch.min.bytes 1 the broker answers a waiting fetch as soon as a record
// arrives on one of its partitions (Kafka's fetch purgatory; kfake's
// watchFetch too). What it bounds is how soon a partition assigned while a
// fetch waits joins the next one: a view's first live records after its
// catch-up hand-over, and partitions added to a topic.
const liveFetchWait = time.Second

// LiveProperties are the live consumer's properties: the binding's, with
// liveFetchWait unless they set fetch.wait.max.ms.
func LiveProperties(props map[string]string) map[string]string {
	if _, ok := props["fetch.wait.max.ms"]; ok {
		return props
	}
	live := make(map[string]string, len(props)+1)
	maps.Copy(live, props)
	live["fetch.wait.max.ms"] = strconv.Itoa(int(liveFetchWait / time.Millisecond))
	return live
}

// LiveConsumerConfig is the librdkafka configuration the views' live
// consumer of a binding with properties props gets: every setting the
// processor owns included. It is for a raw consumer that measures what such
// a client costs on its own (the load generator's idle-routes baseline), so
// the comparison follows any change to the live consumer's settings.
func LiveConsumerConfig(props map[string]string, kafkaTimeout time.Duration, groupID string) *kafka.ConfigMap {
	return ConsumerConfig(LiveProperties(props), kafkaTimeout, groupID)
}

// HistoryReaderConfig is for the log tails' short-lived history readers,
// which read a stream's history in batches.
func HistoryReaderConfig(props map[string]string, kafkaTimeout time.Duration, groupID string) *kafka.ConfigMap {
	cm := WithoutStatistics(ConsumerConfig(props, kafkaTimeout, groupID))
	// A batch is at most BatchBytes of frames: prefetch little, as what is
	// fetched beyond the batch is dropped with the assignment.
	(*cm)["queued.max.messages.kbytes"] = 2048
	(*cm)["fetch.max.bytes"] = 4 << 20
	(*cm)["max.partition.fetch.bytes"] = 1 << 20
	// An offset no longer in the log is reported, not reset past the
	// records the stream was to send: the stream checks the log start and
	// tells its client of the gap.
	(*cm)["auto.offset.reset"] = "error"
	return cm
}

// LogTailConfig is for the log tails' consumer, which reads every streamed
// topic at its end for the streams.
func LogTailConfig(props map[string]string, kafkaTimeout time.Duration, groupID string) *kafka.ConfigMap {
	cm := ConsumerConfig(props, kafkaTimeout, groupID)
	// An offset no longer in the log (records removed above the tail's
	// position before it read them) is reported, not reset past them: the
	// tail checks the log start and ends its streams with the gap.
	(*cm)["auto.offset.reset"] = "error"
	return cm
}

// CatchUpConfig is for the short-lived consumers a view catches up with.
func CatchUpConfig(props map[string]string, kafkaTimeout time.Duration, groupID string) *kafka.ConfigMap {
	cm := WithoutStatistics(ConsumerConfig(props, kafkaTimeout, groupID))
	// A catch-up reads a topic's whole log as fast as it can apply it:
	// its fetched records queue up past queued.max.messages.kbytes, and
	// librdkafka then puts off a partition's next fetch by this much
	// (1 s by default), while the queue drains in a fraction of it. A read
	// of 1 GiB took 8.7 – 11 s at 1 s, 3.6 – 5.3 s at 10 ms.
	if _, ok := props["fetch.queue.backoff.ms"]; !ok {
		(*cm)["fetch.queue.backoff.ms"] = catchUpFetchQueueBackoff
	}
	return cm
}

// catchUpFetchQueueBackoff is the catch-up consumers' fetch.queue.backoff.ms.
const catchUpFetchQueueBackoff = 10

// ReplyReadBackConfig is for the reply index's read-back consumer, which
// reads evicted replies back when they are asked for: a few records that
// are in the log. It prefetches little, and never lets the broker hold a
// fetch at a partition's end (a span read to its end), as the next read's
// fetch on the same connection waits behind it: at 100 ms a read-back took
// 14 ms on the embedded broker, at 1 ms 4 (replies.BenchmarkReplyAnswer).
// It reads committed records only (librdkafka's default, which the index's
// consumer reads at unless the binding says otherwise); nobody reads its
// statistics.
func ReplyReadBackConfig(props map[string]string, kafkaTimeout time.Duration, groupID string) *kafka.ConfigMap {
	cm := WithoutStatistics(ConsumerConfig(props, kafkaTimeout, groupID))
	(*cm)["isolation.level"] = "read_committed"
	(*cm)["queued.max.messages.kbytes"] = 1024
	(*cm)["max.partition.fetch.bytes"] = 256 << 10
	(*cm)["fetch.wait.max.ms"] = 1
	return cm
}

// CheckConfig is for the short-lived clients that check a binding can
// connect.
func CheckConfig(props map[string]string, kafkaTimeout time.Duration) *kafka.ConfigMap {
	return WithoutStatistics(Config(props, kafkaTimeout))
}
