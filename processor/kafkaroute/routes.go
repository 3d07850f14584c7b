package kafkaroute

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// ErrNotConnected is a route whose exit is not a kafka binding connected in
// this processor (a configuration tried without Kafka).
var ErrNotConnected = errors.New("kafka binding not connected in this processor")

// Route is the Kafka side of one route, prepared from the route snapshot.
type Route struct {
	Exit     string            // the kafka binding's name
	Cluster  *kafkaio.Cluster  // everything held for that binding
	Producer *produce.Producer // under the route's acks; produce routes only
	// CorrelationHeader names the correlation-id header of the binding's
	// records, by which the key index knows them.
	CorrelationHeader string
	// FingerprintHeader names the header in which the binding's keyed
	// records carry their key's use and the request's fingerprint.
	FingerprintHeader string
	// Kafka is the kafka binding's configuration: Kafka.Models(topic) are
	// the models a topic's keys and values are checked and converted with.
	Kafka *config.KafkaCluster
}

// Kafka is the Kafka side of every route: the clusters by kafka binding
// name, each route's prepared cluster and producer, and the compaction
// probes both bindings share.
type Kafka struct {
	clusters   map[string]*kafkaio.Cluster
	Compaction Compaction

	mu     sync.Mutex
	routes map[*config.With]*Route
	cfg    *config.Config // the last one prepared
}

// New returns the Kafka side of the routes exiting to clusters (nil: none
// is connected, every route is ErrNotConnected).
func New(clusters map[string]*kafkaio.Cluster) *Kafka {
	return &Kafka{clusters: clusters, routes: map[*config.With]*Route{}}
}

// Prepare readies what cfg's routes use, on start and on every reload: it
// warms the views of the static topics http-kafka fetch routes read,
// indexes every reply-to topic with its binding's correlation header, and
// creates each produce route's producer, so that readiness means all of it
// is caught up. Routes cfg no longer has are forgotten.
func (k *Kafka) Prepare(cfg *config.Config) error {
	routes := map[*config.With]*Route{}
	k.mu.Lock()
	k.cfg = cfg
	k.mu.Unlock()
	for _, b := range cfg.Bindings {
		for _, r := range b.Routes {
			if r.With == nil {
				continue
			}
			kr, err := k.prepare(b, r)
			if errors.Is(err, ErrNotConnected) {
				continue
			}
			if err != nil {
				return err
			}
			routes[r.With] = kr
		}
	}
	k.mu.Lock()
	k.routes = routes
	k.mu.Unlock()
	return nil
}

// Route returns the Kafka side of a matched route, prepared by Prepare (or
// now, for a route no Prepare saw).
func (k *Kafka) Route(b *config.Binding, r *config.Route) (*Route, error) {
	k.mu.Lock()
	kr, ok := k.routes[r.With]
	k.mu.Unlock()
	if ok {
		return kr, nil
	}
	kr, err := k.prepare(b, r)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.routes[r.With] = kr
	k.mu.Unlock()
	return kr, nil
}

func (k *Kafka) prepare(b *config.Binding, r *config.Route) (*Route, error) {
	c, ok := k.clusters[r.Exit]
	if !ok {
		return nil, fmt.Errorf("kafka binding %q: %w", r.Exit, ErrNotConnected)
	}
	corr := correlationHeaders(b)
	kr := &Route{Exit: r.Exit, Cluster: c, CorrelationHeader: corr.CorrelationID, FingerprintHeader: corr.Fingerprint()}
	k.mu.Lock()
	if k.cfg != nil {
		kr.Kafka = k.cfg.Kafka[r.Exit]
	}
	k.mu.Unlock()
	switch r.With.Capability {
	case config.Fetch:
		// A grpc-kafka fetch reads the cluster's log tails, which the
		// cluster creates with the first stream.
		if b.Type == config.HTTPKafka && r.With.Topic.Static() {
			c.Views.Warm(r.With.Topic.Raw)
		}
	case config.Produce:
		if r.With.ReplyTo != "" {
			c.Replies.Add(r.With.ReplyTo, corr.CorrelationID)
		}
		p, err := c.Producer(client.AcksFromName(string(r.With.Acks)))
		if err != nil {
			return nil, err
		}
		kr.Producer = p
	}
	return kr, nil
}

// LogTailsStats sums the sizes of the log tails of every cluster.
func (k *Kafka) LogTailsStats() logtails.Stats {
	var st logtails.Stats
	for _, c := range k.clusters {
		l, ok := c.LogTailsIfAny()
		if !ok {
			continue
		}
		ls := l.Stats()
		st.Topics += ls.Topics
		st.Streams += ls.Streams
		st.RingRecords += ls.RingRecords
		st.RingBytes += ls.RingBytes
		st.Readers += ls.Readers
	}
	return st
}

// correlationHeader is the correlation-id header of a binding's records.
func correlationHeaders(b *config.Binding) config.CorrelationHeaders {
	switch {
	case b.HTTP != nil:
		return b.HTTP.Correlation
	case b.GRPC != nil:
		return b.GRPC.Correlation
	}
	return config.CorrelationHeaders{CorrelationID: config.DefaultCorrelationIDHeader}
}

// StreamFilters resolves a streaming route's filters (a gRPC fetch
// stream's, an SSE stream's) into the log tails' form.
func StreamFilters(fs []config.Filter, resolve func(config.TemplatePart) string) []logtails.Filter {
	if len(fs) == 0 {
		return nil
	}
	out := make([]logtails.Filter, len(fs))
	for i, f := range fs {
		if f.Key != nil {
			k := f.Key.Expand(resolve)
			out[i].Key = &k
		}
		for _, hdr := range f.Headers {
			out[i].Headers = append(out[i].Headers, client.Header{Key: hdr.Name, Value: []byte(hdr.Value.Expand(resolve))})
		}
	}
	return out
}
