package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestNoopByPath checks the many-routes ceiling's no-op server: each path
// gets its own answer, and a path it holds no answer for is refused rather
// than answered with another path's.
func TestNoopByPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	answer := func(code typev3.StatusCode, body string) []*extprocv3.ProcessingResponse {
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: code}, Body: []byte(body)},
		}}}
	}
	n, err := startNoopByPath(map[string][]*extprocv3.ProcessingResponse{
		"/a/k": answer(typev3.StatusCode_OK, "route a"),
		"/b/k": answer(typev3.StatusCode_Created, "route b"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.stop()
	settings, err := shippedSettings()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{log: slog.New(slog.DiscardHandler), settings: settings}
	s, err := e.dial("no-op", n.addr(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for path, want := range map[string]struct {
		status int
		body   string
	}{"/a/k": {200, "route a"}, "/b/k": {201, "route b"}} {
		r, err := exchange(ctx, s.client(0), newRequest(s.client(0), path))
		if err != nil || r.status != want.status || string(r.body) != want.body {
			t.Errorf("GET %s: %d %q, %v; want %d %q", path, r.status, r.body, err, want.status, want.body)
		}
	}
	r, err := exchange(ctx, s.client(0), newRequest(s.client(0), "/c/k"))
	t.Logf("GET /c/k: %d %q %v", r.status, r.body, err)
	if err == nil && (r.status < 500 || r.status > 599) {
		t.Errorf("GET /c/k: %d %q; want a failure", r.status, r.body)
	}
	if _, err := startNoopByPath(nil); err == nil {
		t.Error("a no-op server by path without answers started")
	}
}
