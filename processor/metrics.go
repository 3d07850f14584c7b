package processor

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the exchanges. Labels are bounded: binding names come from the
// configuration; route is the matched route's id (its `id`, or one derived
// from what it matches, so reordering the file keeps it; never the
// request's path) and capability the route's capability, both "none" when
// no route matched; kind is http or grpc. An answer is described by outcome
// (a fixed set, below), code (the HTTP status, "none" for gRPC) and
// grpc_code (the gRPC code name, "none" for HTTP); mode tells long polls
// and streams, which last as long as the client asks, from requests.
type metrics struct {
	exchanges *prometheus.CounterVec
	inFlight  prometheus.Gauge
	duration  *prometheus.HistogramVec

	// The vectors' children by label values: a vector hashes and validates
	// every value on each look-up, and every exchange makes two. Label
	// values are bounded (see above), and so are these maps.
	mu        sync.RWMutex
	counters  map[exchangeLabels]prometheus.Counter
	durations map[durationLabels]prometheus.Observer
}

// exchangeLabels are the label values of exchanges, in its label order.
type exchangeLabels struct{ binding, route, capability, kind, outcome, code, grpcCode string }

// durationLabels are the label values of duration, in its label order.
type durationLabels struct{ binding, route, capability, kind, mode string }

// exchange is the exchanges counter of the label values l.
func (m *metrics) exchange(l exchangeLabels) prometheus.Counter {
	m.mu.RLock()
	c, ok := m.counters[l]
	m.mu.RUnlock()
	if !ok {
		c = m.exchanges.WithLabelValues(l.binding, l.route, l.capability, l.kind, l.outcome, l.code, l.grpcCode)
		m.mu.Lock()
		m.counters[l] = c
		m.mu.Unlock()
	}
	return c
}

// durationOf is the duration histogram of the label values l.
func (m *metrics) durationOf(l durationLabels) prometheus.Observer {
	m.mu.RLock()
	o, ok := m.durations[l]
	m.mu.RUnlock()
	if !ok {
		o = m.duration.WithLabelValues(l.binding, l.route, l.capability, l.kind, l.mode)
		m.mu.Lock()
		m.durations[l] = o
		m.mu.Unlock()
	}
	return o
}

// Label values of exchanges that chose nothing or sent no answer.
const (
	labelNone = "none" // binding, route, capability, code or grpc_code when there is none
)

// Outcomes: what an exchange came to, whatever its protocol.
const (
	outcomeOK          = "ok"           // a 1xx–3xx answer, or gRPC OK
	outcomeClientError = "client_error" // 4xx, or a gRPC code of the client's own making
	outcomeServerError = "server_error" // 5xx, or a gRPC code of the processor's or Kafka's failure
	outcomeCancelled   = "cancelled"    // the client (Envoy) went away first
	outcomeProtocol    = "protocol"     // Envoy's messages broke the protocol; the stream failed
)

// Modes of the duration histogram: a long poll lasts up to the wait the
// client asked for and a stream as long as the client keeps it, so neither
// is mixed with the latency of requests.
const (
	modeRequest  = "request"
	modeLongPoll = "long_poll"
	modeStream   = "stream"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		counters:  map[exchangeLabels]prometheus.Counter{},
		durations: map[durationLabels]prometheus.Observer{},
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kafka_ext_proc_exchanges_total",
			Help: "Exchanges (ext_proc Process streams, one per request) by binding, route (id), capability, kind (http, grpc), outcome (ok, client_error, server_error, cancelled, protocol), code (HTTP status) and grpc_code (gRPC code name).",
		}, []string{"binding", "route", "capability", "kind", "outcome", "code", "grpc_code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kafka_ext_proc_exchanges_in_flight",
			Help: "Exchanges currently open.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kafka_ext_proc_exchange_duration_seconds",
			Help:    "Time from the request headers to the terminal answer, by binding, route, capability, kind and mode (request, long_poll, stream).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"binding", "route", "capability", "kind", "mode"}),
	}
	for _, c := range []prometheus.Collector{m.exchanges, m.inFlight, m.duration} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("%w (one Server per registry)", err)
			}
			return nil, err
		}
	}
	return m, nil
}

// answerLabels are the outcome, code and grpc_code of an answered
// exchange's status: an HTTP status code for kind http, a gRPC code name
// for kind grpc.
func answerLabels(kind, status string) (outcome, code, grpcCode string) {
	code, grpcCode = labelNone, labelNone
	if kind == "grpc" {
		grpcCode = status
	} else {
		code = status
	}
	switch {
	case failedStatus(status):
		return outcomeServerError, code, grpcCode
	case status == "OK":
		return outcomeOK, code, grpcCode
	case kind == "grpc":
		return outcomeClientError, code, grpcCode
	}
	if n, err := strconv.Atoi(status); err == nil && n < 400 {
		return outcomeOK, code, grpcCode
	}
	return outcomeClientError, code, grpcCode
}
