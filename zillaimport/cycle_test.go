package zillaimport

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// Server bindings whose exits lead back onto their own chain (a tls server
// exiting to itself, an http server's route back to the tls server before
// it) are an error at the exit, not an endless walk: the fuzz target found
// the importer recursing until its stack ran out.
func TestServerChainCyclesRefused(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"bindings:\n  tcp0: { type: tcp, kind: server, options: { port: 7114 }, exit: tls0 }\n  tls0: { type: tls, kind: server, exit: tls0 }\n",
			"zilla.yaml:3:42: exit tls0 leads back to a binding already on the way from the tcp server (tls0 → tls0)"},
		{"bindings:\n  tcp0: { type: tcp, kind: server, options: { port: 7114 }, exit: tls0 }\n  tls0: { type: tls, kind: server, exit: http0 }\n" +
			"  http0: { type: http, kind: server, routes: [{ exit: tls0 }] }\n",
			"zilla.yaml:4:55: exit tls0 leads back to a binding already on the way from the tcp server (tls0 → http0 → tls0)"},
	} {
		src := c.src
		done := make(chan error, 1)
		go func() { _, err := Import("zilla.yaml", []byte(src)); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("the import of a cycle did not end:\n%s", src)
		}
		var errs config.Errors
		if !errors.As(err, &errs) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}
