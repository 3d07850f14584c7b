package stack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkagrpc"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// The kafka-grpc workers run inside serve (and dev) beside the ext_proc
// server rather than as a command of their own: one process, one
// configuration file, one drain; a deployment that wants the halves to
// scale apart runs two serve processes with two files.

// startKafkaGRPC starts a worker per kafka-grpc binding and kafka binding
// its routes exit to.
func startKafkaGRPC(cfg *config.Config, logger *slog.Logger, clusters map[string]*kafkaio.Cluster) ([]*kafkagrpc.Worker, error) {
	var workers []*kafkagrpc.Worker
	for _, b := range cfg.KafkaGRPC {
		var exits []string
		for _, r := range b.Routes {
			if !slices.Contains(exits, r.Exit) {
				exits = append(exits, r.Exit)
			}
		}
		for _, exit := range exits {
			w, err := kafkagrpc.Start(kafkagrpc.Options{Binding: b, Cluster: cfg.Kafka[exit], KafkaTimeout: cfg.Limits.KafkaTimeout,
				Silence: cfg.Limits.ReplyTimeout, MaxRecordBytes: int(cfg.Limits.RecordBytes()), Logger: logger,
				MaxCalls: b.MaxCalls, MaxCallsPerPartition: b.MaxCallsPerPartition,
				Replies: clusters[exit].Replies, Keys: clusters[exit].WrittenIDs})
			if err != nil {
				closeKafkaGRPC(context.Background(), workers)
				return nil, fmt.Errorf("starting kafka-grpc binding %q: %w", b.Name, err)
			}
			workers = append(workers, w)
		}
	}
	return workers, nil
}

// listenAndStartWorkers opens the ext_proc port and starts the kafka-grpc
// workers, or neither.
func listenAndStartWorkers(opts ProcessorOptions, logger *slog.Logger, reg prometheus.Registerer,
	clusters map[string]*kafkaio.Cluster) (net.Listener, []*kafkagrpc.Worker, error) {
	lis, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listening for ext_proc on %s: %w", opts.Listen, err)
	}
	workers, err := startKafkaGRPC(opts.Config, logger, clusters)
	if err != nil {
		_ = lis.Close()
		return nil, nil, err
	}
	reg.MustRegister(kafkaGRPCCollector(workers))
	return lis, workers, nil
}

var (
	kgCalls = prometheus.NewDesc("kafka_ext_proc_kafka_grpc_calls_total",
		"kafka-grpc calls by result: answered (the end record acknowledged, whatever its status), failed (a reply not acknowledged: left uncommitted).",
		[]string{"binding", "kafka", "result"}, nil)
	kgStatus = prometheus.NewDesc("kafka_ext_proc_kafka_grpc_answered_by_worker_total",
		"kafka-grpc calls the worker answered itself: unimplemented (no route for the method), unavailable (the service could not be reached), key_reused (FAILED_PRECONDITION: the idempotency key names another request).",
		[]string{"binding", "kafka", "status"}, nil)
	kgSkipped = prometheus.NewDesc("kafka_ext_proc_kafka_grpc_skipped_records_total",
		"Request records skipped: no correlation id, or a reply-to no route answers on.", []string{"binding", "kafka"}, nil)
	kgReplayed = prometheus.NewDesc("kafka_ext_proc_kafka_grpc_replayed_calls_total",
		"kafka-grpc calls read again (after a crash or a rebalance) whose end record the reply index held, in memory or evicted and read back: not made again.",
		[]string{"binding", "kafka"}, nil)
	kgPartitions = prometheus.NewDesc("kafka_ext_proc_kafka_grpc_partitions",
		"Request partitions the consumer group gave this replica's worker.", []string{"binding", "kafka"}, nil)
)

// kafkaGRPCCollector reads the workers' counts at each scrape.
type kafkaGRPCCollector []*kafkagrpc.Worker

func (c kafkaGRPCCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{kgCalls, kgStatus, kgSkipped, kgReplayed, kgPartitions} {
		ch <- d
	}
}

func (c kafkaGRPCCollector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c {
		b, k := w.Names()
		n := w.Counts()
		ch <- prometheus.MustNewConstMetric(kgCalls, prometheus.CounterValue, float64(n.Answered), b, k, "answered")
		ch <- prometheus.MustNewConstMetric(kgCalls, prometheus.CounterValue, float64(n.Failed), b, k, "failed")
		ch <- prometheus.MustNewConstMetric(kgStatus, prometheus.CounterValue, float64(n.Unimplemented), b, k, "unimplemented")
		ch <- prometheus.MustNewConstMetric(kgStatus, prometheus.CounterValue, float64(n.Unavailable), b, k, "unavailable")
		ch <- prometheus.MustNewConstMetric(kgStatus, prometheus.CounterValue, float64(n.KeyReused), b, k, "key_reused")
		ch <- prometheus.MustNewConstMetric(kgSkipped, prometheus.CounterValue, float64(n.Malformed), b, k)
		ch <- prometheus.MustNewConstMetric(kgReplayed, prometheus.CounterValue, float64(n.Replayed), b, k)
		ch <- prometheus.MustNewConstMetric(kgPartitions, prometheus.GaugeValue, float64(w.Partitions()), b, k)
	}
}

// closeKafkaGRPC drains the workers together, until ctx ends.
func closeKafkaGRPC(ctx context.Context, workers []*kafkagrpc.Worker) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Close(ctx)
		}()
	}
	wg.Wait()
}

// sameKafkaGRPC refuses a reload that changes the kafka-grpc bindings: their
// workers hold group memberships and connections made at start.
func sameKafkaGRPC(old, next *config.Config) error {
	strip := func(bs []*config.KafkaGRPCBinding) []config.KafkaGRPCBinding {
		out := make([]config.KafkaGRPCBinding, len(bs))
		for i, b := range bs {
			out[i] = *b
			out[i].Pos = config.Pos{}
			out[i].Routes = nil
			for _, r := range b.Routes {
				rc := *r
				rc.Pos = config.Pos{}
				rc.TLS = nil // compared by TLSSource, and by whether it is set (scheme)
				rc.When = nil
				for _, c := range r.When {
					c.Pos = config.Pos{}
					rc.When = append(rc.When, c)
				}
				out[i].Routes = append(out[i].Routes, &rc)
			}
		}
		return out
	}
	if !reflect.DeepEqual(strip(old.KafkaGRPC), strip(next.KafkaGRPC)) {
		return fmt.Errorf("the kafka-grpc bindings changed: restart to apply")
	}
	return nil
}
