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
	t.Parallel()
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
			if resp.StatusCode != 404 || resp.Header.Get("content-type") != "application/problem+json" || !strings.Contains(string(b), "CONNECT is not served") {
				t.Errorf("got %d %q %s, want the processor's 404 problem", resp.StatusCode, resp.Header.Get("content-type"), b)
			}
		})
	}
}

// Envoy joins repeated content-type headers into one value with "," (an
// inline header, HeaderMapImpl::insertByKey); a produce refuses it rather
// than write a record whose content-type no consumer can read. prefer is
// not an inline header: repeated copies stay separate entries, and either
// form is read as one list.
func TestProduceReadsJoinedHeaders(t *testing.T) {
	t.Parallel()
	e, _, _ := produceEnv(t)
	for name, c := range map[string]*http.Client{"HTTP/1.1": e.h1, "HTTP/2": e.h2c} {
		t.Run(name, func(t *testing.T) {
			resp, body := e.request(c, "POST", "/events", "x", "content-type", "application/json", "content-type", "text/plain")
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "send one content-type, not 2") {
				t.Errorf("two content-types: %d %s, want 400", resp.StatusCode, body)
			}
			for _, prefer := range [][]string{{"prefer", "respond-async", "prefer", "wait=5"}, {"prefer", "respond-async, wait=5"}} {
				resp, body := e.request(c, "POST", "/orders/9", `{"qty":9}`, prefer...)
				if resp.StatusCode != http.StatusCreated || resp.Header.Get("preference-applied") != "wait=5" || !strings.Contains(body, `{"qty":9}`) {
					t.Errorf("prefer %q: %d %q %v, want the reply within wait=5", prefer, resp.StatusCode, body, resp.Header)
				}
			}
		})
	}
	if ev := e.readTopic("events"); len(ev) != 0 {
		t.Errorf("%d records in events, want none", len(ev))
	}
}
