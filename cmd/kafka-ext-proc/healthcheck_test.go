package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHealthcheck(t *testing.T) {
	ready := make(chan bool, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/readyz" && <-ready:
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/readyz":
			http.Error(w, `{"ready":false,"reasons":["view items-snapshots: catching up"]}`, http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	probe := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"healthcheck", "--admin", addr}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}

	ready <- false
	if code, out := probe(); code != 1 || !strings.Contains(out, "503") || !strings.Contains(out, "catching up") {
		t.Errorf("not ready: exit %d, %q; want 1 with the status and reasons", code, out)
	}
	ready <- true
	if code, out := probe(); code != 0 {
		t.Errorf("ready: exit %d, %q", code, out)
	}
	if code, out := probe("--path", "/healthz"); code != 0 {
		t.Errorf("healthz: exit %d, %q", code, out)
	}
	if code, _ := probe("--path", "readyz"); code != 2 {
		t.Errorf("bad --path: exit %d, want 2", code)
	}
}

func TestHealthcheckNoProcessor(t *testing.T) {
	// A port nothing listens on: take one, then free it.
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	var out, errOut bytes.Buffer
	start := time.Now()
	if code := run(context.Background(), []string{"healthcheck", "--admin", addr, "--timeout", "2s"}, &out, &errOut); code != 1 {
		t.Errorf("exit %d, want 1: %s", code, errOut.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s with --timeout 2s", d)
	}
}
