package processor

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
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

// routeSeries are one route's children of exchanges and duration, made
// when a snapshot is built and reached through the matched route
// (route.Match.Ordinal), so that an exchange updates its series without
// hashing and comparing its label values: with many routes that look-up
// read the label strings and map buckets of a different route each time.
// binding, route, capability and kind are the route's own (its binding's
// type fixes the kind); the rest take a few values, and each child is made
// on first use, so /metrics shows the series requests made, as before.
type routeSeries struct {
	m                                *metrics
	cfg                              *config.Route
	binding, route, capability, kind string

	mu        sync.Mutex                         // serializes making children
	answers   atomic.Pointer[[]answerSeries]     // copied on write
	durations [3]atomic.Pointer[observerOfRoute] // by exchange.mode
}

// answerSeries is an exchanges child of a route, by the exchange's
// status label: an HTTP status or gRPC code name, or outcomeCancelled or
// outcomeProtocol for an exchange without an answer.
type answerSeries struct {
	status string
	c      prometheus.Counter
}

type observerOfRoute struct{ o prometheus.Observer }

// newRouteSeries are the series of each route of t, by Match.Ordinal.
func (m *metrics) newRouteSeries(t *route.Table) []routeSeries {
	rs := make([]routeSeries, t.Routes())
	for _, typ := range []config.BindingType{config.HTTPKafka, config.GRPCKafka, config.SSEKafka} {
		kind := kindLabel(kindHTTP)
		if typ == config.GRPCKafka {
			kind = kindLabel(kindGRPC)
		}
		for _, b := range t.OfType(typ) {
			b.EachRoute(func(ordinal int, r *config.Route) {
				rs[ordinal] = routeSeries{m: m, cfg: r, binding: b.Config.Name, route: routeLabelOf(r), capability: capabilityLabelOf(r), kind: kind}
			})
		}
	}
	return rs
}

// exchange is the route's exchanges counter of status (see answerSeries).
func (r *routeSeries) exchange(status string) prometheus.Counter {
	if as := r.answers.Load(); as != nil {
		for i := range *as {
			if (*as)[i].status == status {
				return (*as)[i].c
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var as []answerSeries
	if p := r.answers.Load(); p != nil {
		for _, a := range *p {
			if a.status == status {
				return a.c
			}
		}
		as = append(as, *p...)
	}
	outcome, code, grpcCode := outcomeLabels(r.kind, status)
	c := r.m.exchange(exchangeLabels{r.binding, r.route, r.capability, r.kind, outcome, code, grpcCode})
	as = append(as, answerSeries{status, c})
	r.answers.Store(&as)
	return c
}

// duration is the route's duration histogram of an exchange's mode
// (exchange.mode).
func (r *routeSeries) duration(mode uint8) prometheus.Observer {
	if o := r.durations[mode].Load(); o != nil {
		return o.o
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := r.durations[mode].Load(); o != nil {
		return o.o
	}
	o := &observerOfRoute{r.m.durationOf(durationLabels{r.binding, r.route, r.capability, r.kind, modeLabel(mode)})}
	r.durations[mode].Store(o)
	return o.o
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

// outcomeLabels are the outcome, code and grpc_code of an exchange's status
// label (see answerSeries) for kind.
func outcomeLabels(kind, status string) (outcome, code, grpcCode string) {
	switch status {
	case outcomeCancelled, outcomeProtocol:
		return status, labelNone, labelNone
	}
	return answerLabels(kind, status)
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
