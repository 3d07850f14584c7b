package stack

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// reloadMetrics count configuration reloads, so an alert can say a replica
// is still serving an older configuration than the file holds.
type reloadMetrics struct {
	total       *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	lastOK      prometheus.Gauge
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	m := &reloadMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kafka_ext_proc_config_reloads_total",
			Help: "Configuration reloads (SIGHUP or a change of the configuration or a file it reads) by result: success or failure.",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kafka_ext_proc_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in use was applied (Unix seconds): the last successful reload, or the start.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kafka_ext_proc_config_last_reload_successful",
			Help: "1 when the last reload (or the start) applied the configuration, 0 when it was refused and the previous one keeps serving.",
		}),
	}
	// Both results exist from the start, so rate() and increase() see the
	// first failure.
	m.total.WithLabelValues("success")
	m.total.WithLabelValues("failure")
	m.lastSuccess.SetToCurrentTime()
	m.lastOK.Set(1)
	reg.MustRegister(m.total, m.lastSuccess, m.lastOK)
	return m
}

func (m *reloadMetrics) record(err error) {
	if err != nil {
		m.total.WithLabelValues("failure").Inc()
		m.lastOK.Set(0)
		return
	}
	m.total.WithLabelValues("success").Inc()
	m.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
	m.lastOK.Set(1)
}

// ReloadFrom loads a configuration with load and swaps it in, counting the
// result either way; on error the previous configuration keeps serving.
func (p *Processor) ReloadFrom(load func() (*config.Config, error)) error {
	cfg, err := load()
	if err != nil {
		p.reloads.record(err)
		return err
	}
	return p.Reload(cfg)
}

// Files are the files the configuration in use was read from besides its
// own (${file:} secrets, keys-file): a change to one is a change of the
// configuration.
func (p *Processor) Files() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Files
}
