package kafkaroute

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
)

// Requests with one correlation id share a flight, whatever shard it is in;
// the table empties as the last request of each flight leaves, and a failed
// flight is forgotten at once.
func TestFlightsShareAndLeave(t *testing.T) {
	var tab Flights
	watches := 0
	watch := func() *replies.Watch { watches++; return &replies.Watch{} }
	var leads []*Flight
	for i := range 100 { // ids over every shard
		k := FlightKey{Cluster: "c", ReplyTo: "r", CID: fmt.Sprintf("cid-%d", i)}
		f, lead := tab.Join(k, watch)
		if !lead {
			t.Fatalf("%s: first request is not the lead", k.CID)
		}
		g, lead := tab.Join(k, watch)
		if lead || g != f {
			t.Fatalf("%s: a second request did not attach to the flight", k.CID)
		}
		leads = append(leads, f)
	}
	if watches != 100 || tab.Len() != 100 {
		t.Fatalf("%d watches, %d flights, want 100 each", watches, tab.Len())
	}
	tab.Forget(leads[0]) // its produce failed: a retry produces afresh
	if _, lead := tab.Join(leads[0].Key, watch); !lead {
		t.Fatal("a request after a failed flight attached to it")
	}
	for _, f := range leads[1:] {
		tab.Leave(f) // the attached request
		tab.Leave(f) // the lead's request
		if tab.shard(f.Key).m[f.Key] != f {
			t.Fatalf("%s left the table while its lead still runs", f.Key.CID)
		}
		tab.Leave(f) // the lead, done
	}
	if n := tab.Len(); n != 1 {
		t.Fatalf("%d flights left, want the retried one", n)
	}
}

// Lead lets one request per key write at a time: the next one leads only
// after the first released, and a cancelled wait leaves nothing behind.
func TestFlightsLeadOneAtATime(t *testing.T) {
	var tab Flights
	k := FlightKey{Cluster: "c", Topic: "t", CID: "k-1"}
	release, err := tab.Lead(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tab.Lead(cancelled, k); err == nil {
		t.Fatal("a second lead of a held key did not wait")
	}
	second := make(chan func())
	go func() {
		r, err := tab.Lead(context.Background(), k)
		if err != nil {
			r = nil
		}
		second <- r
	}()
	// Another key is independent.
	other, err := tab.Lead(context.Background(), FlightKey{Cluster: "c", Topic: "t", CID: "k-2"})
	if err != nil {
		t.Fatal(err)
	}
	other()
	release()
	r := <-second
	if r == nil {
		t.Fatal("the waiting request did not lead after the release")
	}
	r()
	if n := tab.Len(); n != 0 {
		t.Fatalf("%d flights left after every lead released", n)
	}
}

// A request attached to a flight waits until its lead finishes, and then
// sees what the lead wrote; a wait after the finish returns at once without
// a channel; a wait whose context ends returns its error.
func TestFlightWaitAndFinish(t *testing.T) {
	// The bubble lets the test wait until the waiting goroutine is blocked in
	// Wait, so "it did not end before the lead finished" is checked, not raced.
	synctest.Test(t, testFlightWaitAndFinish)
}

func testFlightWaitAndFinish(t *testing.T) {
	var tab Flights
	watch := func() *replies.Watch { return &replies.Watch{} }
	k := FlightKey{Cluster: "c", ReplyTo: "r", CID: "k-1"}
	f, lead := tab.Join(k, watch)
	g, attached := tab.Join(k, watch)
	if !lead || attached || g != f {
		t.Fatal("the second request did not attach")
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(cancelled); err != context.Canceled {
		t.Fatalf("a wait with an ended context: %v", err)
	}
	failed := fmt.Errorf("not written")
	waited := make(chan error)
	go func() {
		err := g.Wait(context.Background())
		if err == nil && g.Err != failed {
			err = fmt.Errorf("the lead's outcome is %v after the wait", g.Err)
		}
		waited <- err
	}()
	synctest.Wait()
	select {
	case err := <-waited:
		t.Fatalf("the wait ended before the lead finished: %v", err)
	default:
	}
	f.Err = failed
	f.Finish()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(cancelled); err != nil {
		t.Fatalf("a wait after the finish: %v", err)
	}

	// A lead that finishes before anything waits makes no channel.
	h, _ := tab.Join(FlightKey{Cluster: "c", ReplyTo: "r", CID: "k-2"}, watch)
	h.Finish()
	if err := h.Wait(context.Background()); err != nil || h.done != nil {
		t.Fatalf("a wait after the finish: %v, channel %v", err, h.done)
	}
}

// BenchmarkFlights is a request-reply's use of the table: the lead joins,
// finishes and leaves for itself and its request.
func BenchmarkFlights(b *testing.B) {
	var tab Flights
	watch := func() *replies.Watch { return nil }
	keys := make([]FlightKey, 1024)
	for i := range keys {
		keys[i] = FlightKey{Cluster: "kafka0", ReplyTo: "orders-replies",
			CID: fmt.Sprintf("59410e57-3e0f-4b61-9328-%012x-%032x", i, uint64(i)*0x9e3779b97f4a7c15)}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		f, _ := tab.Join(keys[i%len(keys)], watch)
		tab.Leave(f)
		tab.Leave(f)
		i++
	}
	if tab.Len() != 0 {
		b.Fatal("flights left in the table")
	}
}
