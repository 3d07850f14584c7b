package e2e_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// A CONNECT reaches the processor without :path (Envoy does not refuse it
// without upgrade_configs); the processor answers 404, the status Envoy's
// router gives a CONNECT let through (DownstreamProtocolIntegrationTest.
// ConnectIsBlocked), with a problem saying why.
func TestConnectIsAnswered404(t *testing.T) {
	e := startEnv(t, fetchConfig)
	for name, c := range map[string]*http.Client{"HTTP/1.1": e.h1, "HTTP/2": e.h2c} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodConnect, e.base, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Path = "" // authority-form: CONNECT host:port, no :path
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.ProtoMajor != map[string]int{"HTTP/1.1": 1, "HTTP/2": 2}[name] {
				t.Errorf("answered over %s", resp.Proto)
			}
			if resp.StatusCode != 404 || resp.Header.Get("content-type") != "application/problem+json" || !strings.Contains(string(b), "has no path") {
				t.Errorf("got %d %q %s, want the processor's 404 problem", resp.StatusCode, resp.Header.Get("content-type"), b)
			}
		})
	}
}
