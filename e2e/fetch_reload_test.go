package e2e_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// A fetch route keeps its topic's view between requests: a reload that
// points the same path at another topic answers from the new topic's view,
// and a reload back answers from the first one's, still following it.
func TestReloadPointsAFetchRouteAtItsNewTopic(t *testing.T) {
	t.Parallel()
	e := startEnv(t, opsConfig, func(o *stack.DevOptions) {
		o.BrokerOptions.Topics = append(o.BrokerOptions.Topics, embedded.Topic{Name: "items-v2"})
	})
	e.put("items", 0, "k", []byte("from items"))
	e.put("items-v2", 0, "k", []byte("from items-v2"))
	read := func(when, want string, hdr ...string) string {
		t.Helper()
		r, body := e.request(e.h1, "GET", "/items/k", "", append([]string{"prefer", "wait=10"}, hdr...)...)
		if r.StatusCode != http.StatusOK || body != want {
			t.Fatalf("%s: %d %q, want 200 %q", when, r.StatusCode, body, want)
		}
		return r.Header.Get("etag")
	}
	// A missing record is waited for (prefer: wait), so each read sees the
	// write before it.
	etag := read("before the reload", "from items")

	e.reload("v2.yaml", strings.Replace(opsConfig, "topic: items,", "topic: items-v2,", 1))
	read("after the reload to items-v2", "from items-v2")

	e.reload("v1.yaml", opsConfig)
	e.put("items", 0, "k", []byte("items again"))
	// Changed since the first read: answered once the view has the write.
	read("after the reload back", "items again", "if-none-match", etag)
}
