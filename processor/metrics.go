package processor

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the exchanges. Labels are bounded: binding names come from the
// configuration; route is the matched route's index within its binding (its
// position in the file, never the request's path) and capability the
// route's capability, both "none" when no route matched; kind is http or
// grpc; status is an HTTP status code or a gRPC code name, or one of the
// outcomes below.
type metrics struct {
	exchanges *prometheus.CounterVec
	inFlight  prometheus.Gauge
	duration  *prometheus.HistogramVec
}

// Outcomes of exchanges that sent no answer.
const (
	labelNone       = "none"      // binding, route or capability when none was chosen
	statusCancelled = "cancelled" // the client (Envoy) went away first
	statusProtocol  = "protocol"  // Envoy's messages broke the protocol; the stream failed
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kafka_ext_proc_exchanges_total",
			Help: "Exchanges (ext_proc Process streams, one per request) by binding, route (index in the binding), capability, kind (http, grpc) and answered status.",
		}, []string{"binding", "route", "capability", "kind", "status"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kafka_ext_proc_exchanges_in_flight",
			Help: "Exchanges currently open.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kafka_ext_proc_exchange_duration_seconds",
			Help:    "Time from the request headers to the terminal answer, by binding, route, capability and kind.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"binding", "route", "capability", "kind"}),
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
