// Package observability holds the example Grafana dashboard and Prometheus
// alert rules for kafka-ext-proc, and the tests that keep them true: the
// rules parse with Prometheus's own loader, every query of the rules and
// the dashboard names a metric in metrics.txt, and metrics.txt is what a
// running processor exposes. It is a module of its own so that Prometheus
// stays out of the processor's go.mod.
package observability
