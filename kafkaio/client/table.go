package client

import (
	"fmt"
	"strings"
)

// Clients is a set of the kinds of librdkafka client a cluster runs.
type Clients uint16

// The kinds of client, each built by one configuration function.
const (
	// ProducerAcksNone, ProducerAcksLeader and ProducerAcksAll are the
	// producers of the three acks modes (ProducerConfig).
	ProducerAcksNone Clients = 1 << iota
	ProducerAcksLeader
	ProducerAcksAll
	// LiveConsumer is the views' one long-lived consumer (LiveConsumerConfig).
	LiveConsumer
	// IndexConsumers are the reply index's and the written-id index's
	// long-lived consumers (ConsumerConfig).
	IndexConsumers
	// CatchUpConsumers are the short-lived consumers a view catches up
	// with (CatchUpConfig).
	CatchUpConsumers
	// HistoryReaders are the log tails' short-lived readers of a stream's
	// history (HistoryReaderConfig).
	HistoryReaders
	// LookupClients look up metadata and offsets only: the written-id
	// index's and the log tails' (LookupConfig).
	LookupClients
	// ConnectionChecks are the short-lived clients that check a binding
	// can connect (CheckConfig).
	ConnectionChecks
	// ReplyReadBacks is the reply index's consumer of evicted replies,
	// created with its first read-back (ReplyReadBackConfig).
	ReplyReadBacks
	// LogTailConsumer is the log tails' one long-lived consumer
	// (LogTailConfig).
	LogTailConsumer

	// Producers are the producers of every acks mode.
	Producers = ProducerAcksNone | ProducerAcksLeader | ProducerAcksAll
	// Consumers are every consumer.
	Consumers = LiveConsumer | IndexConsumers | CatchUpConsumers | HistoryReaders | ReplyReadBacks | LogTailConsumer
	// ShortLived are the clients that live for one task.
	ShortLived = CatchUpConsumers | HistoryReaders | ConnectionChecks
	// Unwatched are the clients nobody reads statistics of: the
	// short-lived ones, the look-up clients (a request each) and the reply
	// read-back consumer, whose few reads the read-back metrics describe.
	Unwatched = ShortLived | LookupClients | ReplyReadBacks
	// EveryClient is every kind.
	EveryClient = Producers | Consumers | LookupClients | ConnectionChecks
)

var clientNames = []struct {
	c    Clients
	name string
}{
	{EveryClient, "every client"},
	{Producers, "producers"},
	{Consumers, "consumers"},
	{Unwatched, "short-lived clients, the look-up clients and the reply read-back consumer"},
	{ShortLived, "short-lived clients"},
	{ProducerAcksNone | ProducerAcksLeader, "producers with acks none or leader_only"},
	{ProducerAcksNone, "producers with acks none"},
	{ProducerAcksLeader, "producers with acks leader_only"},
	{ProducerAcksAll, "producers with acks in_sync_replicas"},
	{LiveConsumer, "the views' live consumer"},
	{IndexConsumers, "the reply and written-id consumers"},
	{LogTailConsumer, "the log tail consumer"},
	{CatchUpConsumers, "the views' catch-up consumers"},
	{HistoryReaders, "the log tails' history readers"},
	{LookupClients, "the written-id index's and the log tails' look-up clients"},
	{ConnectionChecks, "the connection checks"},
	{ReplyReadBacks, "the reply read-back consumer"},
}

// String names the set as the table in the docs does.
func (c Clients) String() string {
	var parts []string
	rest := c
	for _, n := range clientNames {
		if rest&n.c == n.c && n.c != 0 {
			parts = append(parts, n.name)
			rest &^= n.c
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("Clients(%#x)", uint16(rest)))
	}
	return strings.Join(parts, ", ")
}

// Rule is how a setting meets the binding's own value for the property.
type Rule int

const (
	// Set: the processor's value always; the binding's is replaced.
	Set Rule = iota
	// Default: the processor's value unless the binding sets the property.
	Default
	// AtMost: the processor's value unless the binding's is lower.
	AtMost
	// AtLeast: the processor's value unless the binding's is higher.
	AtLeast
	// Dropped: the binding's value is taken out; librdkafka's default
	// applies unless another row sets the property.
	Dropped
)

func (r Rule) String() string {
	switch r {
	case Set:
		return "always"
	case Default:
		return "unless the binding sets it"
	case AtMost:
		return "or the binding's value if lower"
	case AtLeast:
		return "or the binding's value if higher"
	case Dropped:
		return "the binding's value is dropped"
	}
	return fmt.Sprintf("Rule(%d)", int(r))
}

// Property is one librdkafka property the processor sets, or takes out of
// a binding's properties, on some of its clients.
type Property struct {
	Name    string
	Value   string // the value, or how it is derived ("" for Dropped)
	Rule    Rule
	Clients Clients
	Why     string
}

// Properties is every librdkafka property the processor sets or drops, by
// client kind: the configuration functions of this package apply exactly
// these (TestConfigsFollowTheTable), and the table in docs/kafka.md is made
// from it (PropertiesMarkdown). A binding's other properties pass through.
var Properties = []Property{
	{"allow.auto.create.topics", "false", Set, EveryClient,
		"producers create a topic they look up by default; a request must never create one"},
	{"topic.metadata.propagation.max.ms", "limits.kafka-timeout", Set, EveryClient,
		"how long a topic missing from the metadata is waited for is the kafka timeout of every call"},
	{"client.id", "kafka-ext-proc-<host name>", Default, EveryClient,
		"brokers log and apply quotas by client id; librdkafka's default is rdkafka for every client of every program"},
	{"go.logs.channel.enable", "true", Set, EveryClient,
		"librdkafka's log lines go through one channel per client into the processor's log"},
	{"log_level", "4", Default, EveryClient,
		"warnings and worse"},
	{"reconnect.backoff.max.ms", "1000", Default, EveryClient,
		"librdkafka's backoff grows to 10 s while a broker is down, and a producer reports a record's timeout only when its broker threads wake: a record that never left was reported up to 6 s late, after its answer had gone out as possibly written (504) rather than not written (503); at 1 s a broker that comes back is found, and a timeout reported, within about a second"},
	{"statistics.interval.ms", "15000", Default, EveryClient &^ Unwatched,
		"librdkafka's statistics feed the metrics (broker round trips, queues, lag)"},
	{"statistics.interval.ms", "0", Set, Unwatched,
		"nobody reads the statistics of a client that lives for one task, nor of a look-up client, nor of the read-back consumer (the read-back metrics describe its reads)"},

	{"group.id", "a group of the replica's own", Set, Consumers,
		"the client needs a group id, but every consumer is assigned its partitions: the group is never joined"},
	{"enable.auto.commit", "false", Set, Consumers,
		"nothing is committed: every replica reads from a time or an offset it chooses"},
	{"enable.auto.offset.store", "false", Set, Consumers,
		"nothing is committed"},
	{"enable.partition.eof", "true", Set, Consumers,
		"the end of a partition tells a reader it has caught up"},
	{"auto.offset.reset", "earliest", Set, Consumers &^ HistoryReaders &^ LogTailConsumer,
		"a partition added to a topic, or an offset no longer in the log, is read from its first record, so nothing written since is missed"},
	{"auto.offset.reset", "error", Set, HistoryReaders | LogTailConsumer,
		"a stream's read whose offset is no longer in the log (retention, DeleteRecords; the log tail too, when it fell behind) is told so, not moved on: the log start is checked and the streams are told of the gap"},
	{"fetch.wait.max.ms", "100", Default, Consumers &^ LiveConsumer &^ ReplyReadBacks,
		"a reader waiting for a record written now is answered within this"},
	{"fetch.wait.max.ms", "1000", Default, LiveConsumer,
		"every fetch the broker answers empty costs work in proportion to the views; a longer wait does not delay wake-ups (a broker answers a waiting fetch when a record arrives) but bounds how soon a partition assigned meanwhile joins the next fetch"},
	{"fetch.queue.backoff.ms", "10", Default, CatchUpConsumers,
		"a catch-up reads a whole log as fast as it applies it, so its queue of fetched records fills; librdkafka then puts off the next fetch by this much (1 s by default) while the queue drains in a fraction of it: a read of 1 GiB took 8.7 – 11 s at 1 s, 3.6 – 5.3 s at 10 ms"},
	{"queued.max.messages.kbytes", "2048", Set, HistoryReaders,
		"a history batch is small: what is prefetched beyond it is dropped with the assignment"},
	{"fetch.max.bytes", "4194304", Set, HistoryReaders,
		"as queued.max.messages.kbytes"},
	{"max.partition.fetch.bytes", "1048576", Set, HistoryReaders,
		"as queued.max.messages.kbytes"},
	{"fetch.wait.max.ms", "1", Set, ReplyReadBacks,
		"a read-back reads records in the log: a fetch the broker held at a partition's end delayed the next read's fetch on the same connection behind it (14 ms a read-back at 100, 4 at 1)"},
	{"queued.max.messages.kbytes", "1024", Set, ReplyReadBacks,
		"a read-back wants a few records: prefetch little"},
	{"max.partition.fetch.bytes", "262144", Set, ReplyReadBacks,
		"as queued.max.messages.kbytes"},
	{"isolation.level", "read_committed", Set, ReplyReadBacks,
		"librdkafka's default, whatever the binding sets: a reply read back is a committed one"},

	{"go.delivery.reports", "false", Set, LookupClients,
		"a look-up client never produces"},

	{"acks", "0, 1 or all, by the route's acks", Set, Producers,
		"one producer per acks mode"},
	{"request.required.acks", "", Dropped, Producers,
		"librdkafka's alias of acks: a map has no order, so an alias left in would win or lose at random"},
	{"enable.idempotence", "true", Set, ProducerAcksAll,
		"with acks=all a possibly written batch is re-sent, and the broker drops the copy only for the idempotent producer"},
	{"enable.idempotence", "", Dropped, ProducerAcksNone | ProducerAcksLeader,
		"idempotence needs acks=all"},
	{"transactional.id", "", Dropped, Producers,
		"the producers are not transactional"},
	{"retries", "", Dropped, Producers,
		"librdkafka's alias of message.send.max.retries"},
	{"message.send.max.retries", "", Dropped, ProducerAcksAll,
		"the idempotent producer keeps librdkafka's retries: a re-sent batch is never written twice"},
	{"message.send.max.retries", "0", Set, ProducerAcksNone | ProducerAcksLeader,
		"a batch that may be in the log is never re-sent: it fails as not acknowledged (504) instead of being written a second time behind a success"},
	{"max.in.flight", "", Dropped, Producers,
		"librdkafka's alias of max.in.flight.requests.per.connection"},
	{"max.in.flight.requests.per.connection", "", Dropped, ProducerAcksAll,
		"the idempotent producer keeps order at librdkafka's default"},
	{"max.in.flight.requests.per.connection", "1", Set, ProducerAcksNone | ProducerAcksLeader,
		"without retries, one request in flight keeps a batch re-sent for free (nothing was written) from being overtaken"},
	{"message.timeout.ms", "max(limits.kafka-timeout - 2 s, limits.kafka-timeout / 3)", Set, Producers,
		"librdkafka scans for timed-out records once a second: the record's own timeout comes early enough for its failure, which says whether it was sent (503 or 504), to arrive before the request stops waiting"},
	{"delivery.timeout.ms", "", Dropped, Producers,
		"librdkafka's alias of message.timeout.ms"},
	{"request.timeout.ms", "message.timeout.ms", AtMost, ProducerAcksNone | ProducerAcksLeader,
		"a request never outlives its records"},
	{"request.timeout.ms", "message.timeout.ms / 3", AtMost, ProducerAcksAll,
		"the idempotent producer may re-send: one re-send then fits before the record's own timeout"},
	{"socket.timeout.ms", "message.timeout.ms / 3", AtMost, ProducerAcksAll,
		"a produce request times out with its first record unless socket.timeout.ms is shorter"},
	{"linger.ms", "1", Default, Producers,
		"every request waits for the acknowledgement of its record, and so pays linger.ms; unless the binding sets linger.ms or its alias queue.buffering.max.ms"},
	{"partitioner", "murmur2_random", Default, Producers,
		"a key goes to the partition Java producers put it in"},
	{"message.max.bytes", "the largest record the limits allow (max-body + 128 KiB), at most 1000000000", AtLeast, Producers,
		"librdkafka never refuses a record the limits let through"},
	{"go.delivery.reports", "", Dropped, Producers,
		"each record's report comes back on a channel of its own"},
	{"go.delivery.report.fields", "none", Set, Producers,
		"the report carries no key, value or headers back: the caller has them"},
	{"delivery.report.only.error", "", Dropped, Producers,
		"every record's report is waited for"},
	{"go.batch.producer", "", Dropped, Producers,
		"records are produced one by one"},
	{"go.events.channel.size", "4096", Set, Producers | LookupClients,
		"the Go client allocates the channel at its full size (1,000,000 by default); it carries only errors and statistics"},
	{"go.produce.channel.size", "1", Set, Producers | LookupClients,
		"as go.events.channel.size; the produce channel is unused"},
}

// PropertiesMarkdown is Properties as a Markdown table: the one in
// docs/kafka.md.
func PropertiesMarkdown() string {
	var b strings.Builder
	b.WriteString("| property | clients | value | why |\n|---|---|---|---|\n")
	for _, p := range Properties {
		val := "dropped"
		if p.Rule != Dropped {
			val = fmt.Sprintf("`%s`, %s", p.Value, p.Rule)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", p.Name, p.Clients, val, p.Why)
	}
	return b.String()
}
