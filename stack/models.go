package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/models"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// modelMetrics count what the topic models do on the read side and report
// the schema registries.
type modelMetrics struct {
	invalid    *prometheus.CounterVec
	registries *registryCollector
}

func newModelMetrics(reg prometheus.Registerer, cfg *config.Config) *modelMetrics {
	m := &modelMetrics{invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kafka_ext_proc_model_invalid_records_total",
		Help: "Records left out of views and gRPC fetch streams because they do not match their topic's model, by kafka binding and options.topics entry.",
	}, []string{"kafka", "topic"}), registries: &registryCollector{}}
	m.registries.cfg.Store(cfg)
	reg.MustRegister(m.invalid, m.registries)
	return m
}

// converters returns the view converters of one kafka binding: each
// topic's models decode keys and values once, as records enter the view.
// A record that does not match is left out, counted, and logged once per
// topic (with its position, never its content); one whose schema cannot be
// had now is held aside by the view and served once it converts.
func (m *modelMetrics) converters(name string, k *config.KafkaCluster, logger *slog.Logger) func(topic string) views.Converter {
	var logged sync.Map // topics whose first refused record was logged
	return func(topic string) views.Converter {
		tm := k.Models(topic)
		if tm == nil || (tm.Key == nil && tm.Value == nil) {
			return nil
		}
		counter := m.invalid.WithLabelValues(name, tm.Name)
		return func(r *client.Record) error {
			err := convert(context.Background(), tm, r)
			switch {
			case err == nil:
				return nil
			case models.KindOf(err) == models.KindUnavailable:
				// Held aside by the view and tried again: the registry
				// may answer later. Its health is logged by the catalog.
				return fmt.Errorf("%w: %w", views.ErrLater, err)
			}
			counter.Inc()
			if _, seen := logged.LoadOrStore(topic, true); !seen {
				logger.Warn("a record does not match its topic's model and is left out of the view (further ones are counted in kafka_ext_proc_model_invalid_records_total)",
					"kafka", name, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "kind", models.KindOf(err).String())
			}
			return err
		}
	}
}

// decoders returns the stream decoders of one kafka binding: a topic's
// value model checks each record and takes the registry's framing off, once
// per record as it enters the topic's log tail, so gRPC fetch streams send
// the plain message. A record that does not match is left out of the
// streams, counted and logged once per topic, as views do; one whose schema
// cannot be had now ends the streams reaching it UNAVAILABLE, to resume at
// it (views.ErrLater).
func (m *modelMetrics) decoders(name string, k *config.KafkaCluster, logger *slog.Logger) func(topic string) logtails.StreamDecoder {
	var logged sync.Map // topics whose first refused record was logged
	return func(topic string) logtails.StreamDecoder {
		tm := k.Models(topic)
		if tm == nil || tm.Value == nil {
			return nil
		}
		counter := m.invalid.WithLabelValues(name, tm.Name)
		return func(ctx context.Context, r *client.Record) ([]byte, error) {
			v, err := tm.Value.DecodeNative(ctx, nil, r.Value)
			switch {
			case err == nil:
				return v, nil
			case models.KindOf(err) == models.KindUnavailable:
				return nil, fmt.Errorf("%w: %w", views.ErrLater, err)
			}
			counter.Inc()
			if _, seen := logged.LoadOrStore(topic, true); !seen {
				logger.Warn("a record does not match its topic's model and is left out of fetch streams (further ones are counted in kafka_ext_proc_model_invalid_records_total)",
					"kafka", name, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "kind", models.KindOf(err).String())
			}
			return nil, err
		}
	}
}

// convert decodes r's key and value in place.
func convert(ctx context.Context, tm *config.TopicModels, r *client.Record) error {
	if tm.Key != nil {
		k, err := tm.Key.Decode(ctx, nil, r.Key)
		if err != nil {
			return err
		}
		r.Key = k
	}
	if tm.Value != nil {
		v, err := tm.Value.Decode(ctx, nil, r.Value)
		if err != nil {
			return err
		}
		r.Value = v
		if tm.Value.JSON() {
			// What the view serves is JSON, whatever the writer's
			// content-type header said about the bytes in Kafka.
			r.Headers = client.ReplaceHeader(r.Headers, "content-type", []byte("application/json"))
		}
	}
	return nil
}

// warmModels looks every registry schema the topic models name up once at
// start, so the first requests find them cached; a schema that cannot be
// had is logged (requests needing it answer 503 until it can).
func warmModels(ctx context.Context, cfg *config.Config, logger *slog.Logger, wg *sync.WaitGroup) {
	for name, k := range cfg.Kafka {
		for _, t := range k.Topics {
			for _, m := range []*models.Model{t.Key, t.Value} {
				if m == nil {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					if err := m.Warm(wctx); err != nil && !errors.Is(err, context.Canceled) {
						logger.Warn("a topic model's schema cannot be had yet", "kafka", name, "topic", t.Name, "err", err)
					}
				}()
			}
		}
	}
}

// registryCollector reports each schema-registry catalog: whether its last
// request succeeded, and its request and failure counts (steady state
// makes no requests: schemas are cached).
type registryCollector struct {
	cfg atomic.Pointer[config.Config] // the configuration serving, swapped on reload
}

var (
	registryUp = prometheus.NewDesc("kafka_ext_proc_schema_registry_up",
		"1 while the schema registry's last request succeeded; 0 while it fails (cached schemas are still served).", []string{"catalog"}, nil)
	registryRequests = prometheus.NewDesc("kafka_ext_proc_schema_registry_requests_total",
		"HTTP requests sent to the schema registry.", []string{"catalog"}, nil)
	registryFailures = prometheus.NewDesc("kafka_ext_proc_schema_registry_failures_total",
		"Schema lookups that failed for a reason other than not found (unreachable, timeout, 5xx, auth).", []string{"catalog"}, nil)
)

func (c *registryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- registryUp
	ch <- registryRequests
	ch <- registryFailures
}

func (c *registryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.cfg.Load().Registries() {
		st := r.Status()
		up := 0.0
		if st.Healthy {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(registryUp, prometheus.GaugeValue, up, st.Catalog)
		ch <- prometheus.MustNewConstMetric(registryRequests, prometheus.CounterValue, float64(st.Requests), st.Catalog)
		ch <- prometheus.MustNewConstMetric(registryFailures, prometheus.CounterValue, float64(st.Failures), st.Catalog)
	}
}

// sameTopicModels reports whether two kafka bindings' topic models are
// written the same.
func sameTopicModels(a, b []*config.TopicModels) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].KeyConfig != b[i].KeyConfig || a[i].ValueConfig != b[i].ValueConfig {
			return false
		}
	}
	return true
}

// registryNotes say, for /readyz, which schema registries fail now and
// which subjects they lack; requests whose schemas are cached are served.
func (c *registryCollector) notes() []string {
	var out []string
	for _, r := range c.cfg.Load().Registries() {
		st := r.Status()
		if !st.Healthy {
			out = append(out, fmt.Sprintf("catalog %s: the schema registry is unreachable since %s (%s); cached schemas are served",
				st.Catalog, st.Since.UTC().Format(time.RFC3339), st.LastError))
		}
		for _, m := range st.Missing {
			out = append(out, fmt.Sprintf("catalog %s: the schema registry does not have %s", st.Catalog, m))
		}
	}
	return out
}
