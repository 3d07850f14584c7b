package main

import (
	"log/slog"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The request counter sees a client's requests by kind and leaves them to
// the broker, which answers them as before.
func TestCountRequestsSeesMetadataAndAnswers(t *testing.T) {
	broker, err := startBroker(slog.New(slog.DiscardHandler), brokerTopic{Name: "counted"})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	reqs := countRequests(broker.Cluster())
	before := reqs.snapshot()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": broker.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	topic := "counted"
	const asks = 3
	for range asks {
		md, err := p.GetMetadata(&topic, false, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if tm := md.Topics[topic]; len(tm.Partitions) != 1 {
			t.Fatalf("the broker answered %+v, want topic %s with 1 partition", md.Topics, topic)
		}
	}
	got := requestsSince(before, reqs.snapshot())
	// librdkafka asks for metadata of its own too (on connecting).
	if got["Metadata"] < asks || got["ApiVersions"] < 1 {
		t.Errorf("counted %v, want at least %d Metadata and 1 ApiVersions", got, asks)
	}
	if s := requestList(map[string]int64{"Metadata": 3, "Fetch": 30}); s != "Fetch 30, Metadata 3" {
		t.Errorf("requestList: %q", s)
	}
	if s := requestList(nil); s != "none" {
		t.Errorf("requestList(nil): %q", s)
	}
}
