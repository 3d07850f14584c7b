package e2e_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// withCORS runs the emulator on the shipped envoy.yaml with its CORS route
// and filter uncommented.
func withCORS(t *testing.T) func(*stack.DevOptions) {
	y, err := envoy.Uncommented(envoy.DefaultYAML(), "cors-route", "cors-filter")
	if err != nil {
		t.Fatal(err)
	}
	return func(o *stack.DevOptions) { o.Envoy = y }
}

func demoEnv(t *testing.T, opts ...func(*stack.DevOptions)) *env {
	demo, err := os.ReadFile("../cmd/kafka-ext-proc/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return startEnv(t, string(demo), opts...)
}

// With the CORS blocks uncommented, Envoy's CORS filter answers a browser's
// preflight on the demo's produce route itself: 200 with the policy's
// access-control-* headers, and nothing is written to Kafka.
func TestCORSPreflightAnsweredByEnvoy(t *testing.T) {
	t.Parallel()
	e := demoEnv(t, withCORS(t))
	if resp, body := e.request(e.h1, "PUT", "/items/2", `{"n":2}`, "content-type", "application/json"); resp.StatusCode != 204 {
		t.Fatalf("PUT: %d %q", resp.StatusCode, body)
	}
	for _, c := range []*http.Client{e.h1, e.h2c} {
		resp, body := e.request(c, "OPTIONS", "/items/2", "", "origin", "https://app.example.com",
			"access-control-request-method", "PUT", "access-control-request-headers", "content-type")
		if resp.StatusCode != 200 || body != "" ||
			resp.Header.Get("access-control-allow-origin") != "https://app.example.com" ||
			resp.Header.Get("access-control-allow-methods") != "GET, HEAD, POST, PUT, PATCH, DELETE" ||
			resp.Header.Get("access-control-allow-headers") == "" || resp.Header.Get("access-control-max-age") != "600" {
			t.Fatalf("preflight: %d %v %q, want Envoy's 200 with access-control-*", resp.StatusCode, resp.Header, body)
		}
	}
	if got := e.itemsWritten("items-snapshots")["2"]; len(got) != 1 || got[0] != `{"n":2}` {
		t.Fatalf("records of key 2: %q, want the PUT's only", got)
	}
}

// An actual cross-origin PUT and GET through the CORS filter carry
// access-control-allow-origin and -expose-headers on the processor's answers.
func TestCORSActualRequestsCarryAllowOrigin(t *testing.T) {
	t.Parallel()
	e := demoEnv(t, withCORS(t))
	const origin = "https://app.example.com"
	resp, body := e.request(e.h1, "PUT", "/items/5", `{"n":5}`, "content-type", "application/json", "origin", origin)
	if resp.StatusCode != 204 || resp.Header.Get("access-control-allow-origin") != origin ||
		resp.Header.Get("access-control-expose-headers") != "etag, location, preference-applied, retry-after" {
		t.Fatalf("PUT: %d %v %q, want 204 with access-control-allow-origin", resp.StatusCode, resp.Header, body)
	}
	resp, body = e.request(e.h2c, "GET", "/items/5", "", "prefer", "wait=5", "origin", origin)
	if resp.StatusCode != 200 || body != `{"n":5}` || resp.Header.Get("access-control-allow-origin") != origin {
		t.Fatalf("GET: %d %v %q, want the item with access-control-allow-origin", resp.StatusCode, resp.Header, body)
	}
	resp, _ = e.request(e.h1, "GET", "/items/5", "", "origin", "https://evil.example")
	if resp.Header.Get("access-control-allow-origin") != "" {
		t.Fatalf("GET from another origin: %v, want no access-control-allow-origin", resp.Header)
	}
}
