package httpkafka_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
)

type requestCounts struct{ apiVersions, listOffsets, fetch, metadata atomic.Int64 }

func (c *requestCounts) snapshot() [4]int64 {
	return [4]int64{c.apiVersions.Load(), c.listOffsets.Load(), c.fetch.Load(), c.metadata.Load()}
}

// Nothing scales per request: 1,000 long polls add no connection (each new
// connection starts with ApiVersions), no ListOffsets, no Metadata, and
// leave the Fetch rate that of the shared consumers.
func TestWaitersAddNoKafkaRequests(t *testing.T) {
	f := newFixture(t, 1)
	f.put(0, "k", []byte(`"v1"`))
	var counts requestCounts
	observe := func(n *atomic.Int64) func(kmsg.Request) (kmsg.Response, error, bool) {
		return func(kmsg.Request) (kmsg.Response, error, bool) { n.Add(1); return nil, nil, false }
	}
	cl := f.broker.Cluster()
	cl.ControlKey(int16(kmsg.ApiVersions), observe(&counts.apiVersions))
	cl.ControlKey(int16(kmsg.ListOffsets), observe(&counts.listOffsets))
	cl.ControlKey(int16(kmsg.Fetch), observe(&counts.fetch))
	cl.ControlKey(int16(kmsg.Metadata), observe(&counts.metadata))

	single, merged := f.route(0, f.client), f.route(1, f.client)
	id := map[string]string{"id": "k"}
	stag := header(get(single, id), "etag")
	mtag := header(get(merged, nil), "etag")

	const window = time.Second
	before0 := counts.snapshot()
	time.Sleep(window) // a rate is measured over time
	before1 := counts.snapshot()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	const n = 1000
	for i := 0; i < n/2; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			single.Serve(ctx, context.Background(), httpkafka.FetchRequest{Params: id, IfNoneMatch: []string{stag}, Prefer: []string{"wait=60"}, Limits: fixtureLimits()})
		}()
		go func() {
			defer wg.Done()
			merged.Serve(ctx, context.Background(), httpkafka.FetchRequest{IfNoneMatch: []string{mtag}, Prefer: []string{"wait=60"}, Limits: fixtureLimits()})
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for single.Waiting()+merged.Waiting() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", single.Waiting()+merged.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
	during0 := counts.snapshot()
	time.Sleep(window)
	during1 := counts.snapshot()
	cancel()
	wg.Wait()

	idle := before1[2] - before0[2]
	busy := during1[2] - during0[2]
	t.Logf("per %v: fetch %d idle, %d with %d waiters; ApiVersions %d→%d, ListOffsets %d→%d, Metadata %d→%d",
		window, idle, busy, n, before1[0], during1[0], before1[1], during1[1], before1[3], during1[3])
	if during1[0] != before1[0] {
		t.Errorf("waiters opened %d connections", during1[0]-before1[0])
	}
	if during1[1] != before1[1] {
		t.Errorf("waiters sent %d ListOffsets requests", during1[1]-before1[1])
	}
	if during1[3] != before1[3] {
		t.Errorf("waiters sent %d Metadata requests", during1[3]-before1[3])
	}
	if busy > 2*idle+5 {
		t.Errorf("fetch requests per %v: %d with waiters vs %d idle", window, busy, idle)
	}
}
