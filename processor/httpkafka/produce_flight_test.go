package httpkafka

import (
	"fmt"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
)

// Requests with one correlation id share a flight, whatever shard it is in;
// the table empties as the last request of each flight leaves, and a failed
// flight is forgotten at once.
func TestFlightsShareAndLeave(t *testing.T) {
	var tab flights
	watches := 0
	watch := func() *kafkaio.ReplyWatch { watches++; return &kafkaio.ReplyWatch{} }
	var leads []*flight
	for i := range 100 { // ids over every shard
		k := flightKey{cluster: "c", replyTo: "r", cid: fmt.Sprintf("cid-%d", i)}
		f, lead := tab.join(k, watch)
		if !lead {
			t.Fatalf("%s: first request is not the lead", k.cid)
		}
		g, lead := tab.join(k, watch)
		if lead || g != f {
			t.Fatalf("%s: a second request did not attach to the flight", k.cid)
		}
		leads = append(leads, f)
	}
	if watches != 100 || tab.len() != 100 {
		t.Fatalf("%d watches, %d flights, want 100 each", watches, tab.len())
	}
	tab.forget(leads[0]) // its produce failed: a retry produces afresh
	if _, lead := tab.join(leads[0].key, watch); !lead {
		t.Fatal("a request after a failed flight attached to it")
	}
	for _, f := range leads[1:] {
		tab.leave(f) // the attached request
		tab.leave(f) // the lead's request
		if tab.shard(f.key).m[f.key] != f {
			t.Fatalf("%s left the table while its lead still runs", f.key.cid)
		}
		tab.leave(f) // the lead, done
	}
	if n := tab.len(); n != 1 {
		t.Fatalf("%d flights left, want the retried one", n)
	}
}
