package main

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// The idle-routes baseline: what the processor cannot avoid while its views
// idle. A view has to be read by a Kafka consumer assigned to its
// partitions; one raw librdkafka consumer with the live consumer's settings
// (client.LiveConsumerConfig: fetch wait, statistics, log channel, …),
// assigned to every topic's partition at its end and polling, is that floor.
// Its idle CPU, with the broker's answers to it, is measured in the same run
// as the processor's, so idle_ratio compares like with like.

// rawPollTimeout is the baseline's Poll timeout: the confluent-kafka-go
// examples' consumer loop.
const rawPollTimeout = 100 * time.Millisecond

// rawIdle is the baseline's measurement over one idle window.
type rawIdle struct {
	cores        float64            // this process's cores, the broker alone included
	librdkafka   *float64           // librdkafka's threads, absent without /proc
	threads      map[string]float64 // librdkafka's part by thread name
	threadCounts map[string]int     // librdkafka's threads by name at the window's end
	requests     map[string]int64   // the broker's requests in the window, by kind
}

// measureIdle measures this process's CPU over d, the part of it in the
// librdkafka threads not in others (by name) where /proc tells it, and the
// requests the broker answered meanwhile.
func measureIdle(ctx context.Context, d time.Duration, reqs *requestCounts, others map[string]bool) (rawIdle, error) {
	var res rawIdle
	rdk0, rdkErr := threadsCPUByName("rdk:", others)
	req0 := reqs.snapshot()
	t0 := time.Now()
	var err error
	if res.cores, err = idleCores(ctx, d); err != nil {
		return rawIdle{}, err
	}
	res.requests = requestsSince(req0, reqs.snapshot())
	if rdk1, err := threadsCPUByName("rdk:", others); err == nil && rdkErr == nil {
		res.threads = threadCores(rdk0.cpu, rdk1.cpu, time.Since(t0))
		res.threadCounts = rdk1.count
		var c float64
		for _, t := range res.threads {
			c += t
		}
		res.librdkafka = &c
	}
	return res, nil
}

// measureRawIdle starts the baseline consumer on partition 0 of topics
// (one-partition topics, as idle-routes makes), waits until it has reached
// the end of every one (a partition-EOF event each), measures this
// process's CPU over d, and closes the consumer. extra are the binding's
// properties beyond the broker's address, as the processor gets them.
func measureRawIdle(ctx context.Context, broker string, reqs *requestCounts, extra map[string]string, topics []string, d time.Duration) (rawIdle, error) {
	props := map[string]string{"bootstrap.servers": broker}
	maps.Copy(props, extra)
	others := librdkafkaThreadIDs()
	cons, err := kafka.NewConsumer(client.LiveConsumerConfig(props, client.DefaultKafkaTimeout, "bench-idle-raw"))
	if err != nil {
		return rawIdle{}, fmt.Errorf("the idle-routes baseline consumer: %w", err)
	}
	// The logs channel is set up by the live consumer's settings: read it
	// as the processor does (one goroutine per client), dropping the lines.
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		for range cons.Logs() {
		}
	}()
	defer func() {
		_ = cons.Close() // closes the logs channel
		<-logsDone
	}()
	assign := make([]kafka.TopicPartition, len(topics))
	for i := range topics {
		assign[i] = kafka.TopicPartition{Topic: &topics[i], Partition: 0, Offset: kafka.OffsetEnd}
	}
	if err := cons.Assign(assign); err != nil {
		return rawIdle{}, fmt.Errorf("assigning %d partitions to the baseline consumer: %w", len(assign), err)
	}

	// stop ends the poll loop; ended reports the partitions at their end
	// (once, when all are) and then the loop's end.
	stop := make(chan struct{})
	atEnd := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		eof := make(map[string]bool, len(topics))
		timeout := int(rawPollTimeout / time.Millisecond)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if ev, ok := cons.Poll(timeout).(kafka.PartitionEOF); ok && ev.Topic != nil && len(eof) < len(topics) {
				eof[*ev.Topic] = true
				if len(eof) == len(topics) {
					close(atEnd)
				}
			}
		}
	}()
	defer func() {
		close(stop)
		<-loopDone
	}()
	select {
	case <-atEnd:
	case <-time.After(5 * time.Minute):
		return rawIdle{}, fmt.Errorf("the baseline consumer did not reach the end of its %d partitions in 5 minutes", len(topics))
	case <-ctx.Done():
		return rawIdle{}, ctx.Err()
	}
	return measureIdle(ctx, d, reqs, others)
}

// librdkafkaThreadIDs are the librdkafka threads alive now (the other
// scenarios' shared servers' clients among them), to leave out of a
// measurement of clients started after; nil where /proc is not.
func librdkafkaThreadIDs() map[string]bool {
	s, err := threadsCPUByName("rdk:", nil)
	if err != nil {
		return nil
	}
	return s.ids
}
