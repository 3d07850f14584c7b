// Package admin serves the operator's HTTP endpoints (Prometheus /metrics,
// /healthz, /readyz) and holds the readiness state they report. Readiness is
// a value passed to whatever can make the process unready (Kafka views, reply
// indexes, drain), never a global.
package admin

import (
	"encoding/json"
	"net/http"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness is a set of named conditions; the process is ready when every one
// is ready. A condition that was never set does not exist.
type Readiness struct {
	mu      sync.Mutex
	conds   map[string]string // name → reason it is not ready ("" = ready)
	watches []func(ready bool)
	notes   func() []string
}

// SetNotes installs what /readyz reports beside readiness without making
// the process unready: a degraded dependency whose loss traffic survives
// (a schema registry while schemas are cached).
func (r *Readiness) SetNotes(fn func() []string) {
	r.mu.Lock()
	r.notes = fn
	r.mu.Unlock()
}

// Notes are the current notes, if any.
func (r *Readiness) Notes() []string {
	r.mu.Lock()
	fn := r.notes
	r.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn()
}

// NewReadiness returns readiness with no conditions (ready).
func NewReadiness() *Readiness { return &Readiness{conds: map[string]string{}} }

// Set records a condition: ready, or not ready for reason.
func (r *Readiness) Set(name string, ready bool, reason string) {
	if ready {
		reason = ""
	} else if reason == "" {
		reason = "not ready"
	}
	r.mu.Lock()
	before := r.readyLocked()
	r.conds[name] = reason
	after := r.readyLocked()
	watches := r.watches
	r.mu.Unlock()
	if before != after {
		for _, w := range watches {
			w(after)
		}
	}
}

// Remove drops a condition.
func (r *Readiness) Remove(name string) {
	r.mu.Lock()
	before := r.readyLocked()
	delete(r.conds, name)
	after := r.readyLocked()
	watches := r.watches
	r.mu.Unlock()
	if before != after {
		for _, w := range watches {
			w(after)
		}
	}
}

// Watch calls fn with the current state now and on every change.
func (r *Readiness) Watch(fn func(ready bool)) {
	r.mu.Lock()
	r.watches = append(r.watches, fn)
	ready := r.readyLocked()
	r.mu.Unlock()
	fn(ready)
}

// Ready reports whether every condition is ready, and the reasons of those
// that are not, sorted by name.
func (r *Readiness) Ready() (bool, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var reasons []string
	for name, reason := range r.conds {
		if reason != "" {
			reasons = append(reasons, name+": "+reason)
		}
	}
	sort.Strings(reasons)
	return len(reasons) == 0, reasons
}

// Names are the conditions set, ready or not, sorted.
func (r *Readiness) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.conds))
	for name := range r.conds {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func (r *Readiness) readyLocked() bool {
	for _, reason := range r.conds {
		if reason != "" {
			return false
		}
	}
	return true
}

// Handler serves /metrics from the registry, /healthz (the process is up) and
// /readyz (200 when ready, else 503 with the reasons as JSON).
func Handler(reg *prometheus.Registry, r *Readiness) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, reasons := r.Ready()
		out := map[string]any{"status": "ready"}
		if notes := r.Notes(); len(notes) > 0 {
			out["notes"] = notes
		}
		if ready {
			writeJSON(w, http.StatusOK, out)
			return
		}
		out["status"], out["reasons"] = "not ready", reasons
		writeJSON(w, http.StatusServiceUnavailable, out)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
