package e2e_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
)

// The event streams' series on /metrics: streams open, events sent,
// resumes, resumes refused for a gap, and streams ended by the shutdown.
func TestSSEMetrics(t *testing.T) {
	t.Parallel()
	e := startSSE(t, withAdmin)
	for _, v := range []string{"v0", "v1", "v2"} {
		e.put("events", 0, "k", []byte(v))
	}
	fresh := e.openSSE(e.h1, "/events")
	evs := fresh.take(t, 3)
	resumed := e.openSSE(e.h2c, "/events", "last-event-id", evs[0].id)
	if got := resumed.take(t, 2); got[0].data != "v1" || got[1].data != "v2" {
		t.Fatalf("resumed after v0: %+v", got)
	}
	// An id naming a partition the topic lacks: refused, nothing streamed.
	foreign := base64.StdEncoding.EncodeToString(grpcwire.AppendMessageID(nil, []int64{1, 1}))
	if s := e.openSSE(e.h1, "/events", "last-event-id", foreign); s.resp.StatusCode != 400 {
		t.Fatalf("a foreign id: %d", s.resp.StatusCode)
	}

	mfs := e.scrapeNow()
	for name, want := range map[string]float64{
		"kafka_ext_proc_sse_streams":       2,
		"kafka_ext_proc_sse_events_total":  5, // 3 + the 2 after the resume point
		"kafka_ext_proc_sse_resumes_total": 1,
		"kafka_ext_proc_sse_gaps_total":    1,
		"kafka_ext_proc_sse_lagged_total":  0,
		"kafka_ext_proc_sse_drained_total": 0,
	} {
		if _, ok := mfs[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		} else if got := value(mfs, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	resumed.close()
	e.waitGauge("kafka_ext_proc_sse_streams", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.dev.Processor.Shutdown(ctx)
	fresh.comment(t, "shutting down")
	fresh.ended(t)
	// The admin listener is gone with the shutdown; the registry is not.
	gathered, err := e.dev.Processor.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	after := map[string]*dto.MetricFamily{}
	for _, mf := range gathered {
		after[mf.GetName()] = mf
	}
	if got := value(after, "kafka_ext_proc_sse_drained_total", nil); got != 1 {
		t.Errorf("kafka_ext_proc_sse_drained_total after the shutdown = %v, want 1", got)
	}
	if got := value(after, "kafka_ext_proc_sse_streams", nil); got != 0 {
		t.Errorf("kafka_ext_proc_sse_streams after the shutdown = %v, want 0", got)
	}
}
