package stack

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/buildinfo"
)

// buildInfoGauge is kafka_ext_proc_build_info{version,commit,go_version} 1,
// so dashboards can tell which build each replica runs.
func buildInfoGauge() prometheus.Collector {
	bi := buildinfo.Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kafka_ext_proc_build_info",
		Help: "The running build: module version, VCS commit and Go version; always 1.",
		ConstLabels: prometheus.Labels{
			"version": bi.Version, "commit": bi.Commit, "go_version": bi.GoVersion,
		},
	})
	g.Set(1)
	return g
}
