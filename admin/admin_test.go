package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/admin"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestReadyzFollowsConditions(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "probe_total", Help: "probe"})
	reg.MustRegister(c)
	c.Inc()
	r := admin.NewReadiness()
	var seen []bool
	r.Watch(func(ready bool) { seen = append(seen, ready) })
	h := admin.Handler(reg, r)

	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz with no conditions = %d, want 200", code)
	}
	r.Set("views", false, "catching up on items")
	r.Set("replies", true, "")
	code, body := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("readyz = %d, want 503", code)
	}
	var doc struct{ Reasons []string }
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Reasons) != 1 || doc.Reasons[0] != "views: catching up on items" {
		t.Fatalf("reasons = %q", doc.Reasons)
	}
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz = %d while not ready, want 200", code)
	}
	r.Set("views", true, "")
	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz after catch-up = %d", code)
	}
	if names := r.Names(); len(names) != 2 || names[0] != "replies" || names[1] != "views" {
		t.Fatalf("names = %q, want both conditions, ready ones too", names)
	}
	if want := []bool{true, false, true}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Fatalf("watch saw %v, want %v", seen, want)
	}
	if _, body := get(t, h, "/metrics"); !strings.Contains(body, "probe_total 1") {
		t.Fatalf("metrics lack the registered counter:\n%s", body)
	}
}

// TestReadyzNotes: notes show in /readyz without making the process unready.
func TestReadyzNotes(t *testing.T) {
	r := admin.NewReadiness()
	r.SetNotes(func() []string { return []string{"catalog registry0: the schema registry is unreachable"} })
	code, body := get(t, admin.Handler(prometheus.NewRegistry(), r), "/readyz")
	var doc struct {
		Status string
		Notes  []string
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || doc.Status != "ready" || len(doc.Notes) != 1 || !strings.Contains(doc.Notes[0], "unreachable") {
		t.Fatalf("readyz = %d %s, want 200 ready with the note", code, body)
	}
}
