package client

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// The samples in testdata are statistics events librdkafka emitted against
// the embedded broker: a producer that wrote 5 records to a topic of two
// partitions, and a consumer assigned both partitions (one at offset 1) that
// read to their ends.
func readSample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/rdkafka-stats-" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseClientStatsProducer(t *testing.T) {
	s, err := ParseClientStats(readSample(t, "producer"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != "producer" || s.MsgCnt != 0 || s.MsgSize != 0 || s.Lag != nil {
		t.Errorf("got type %q, queue %d/%d, lag %v; want producer, 0/0, none", s.Type, s.MsgCnt, s.MsgSize, s.Lag)
	}
	// One broker, by host:port; the bootstrap entry is the same broker.
	if len(s.Brokers) != 1 || s.Brokers[0].Name != "127.0.0.1:41765" {
		t.Fatalf("brokers %+v, want the one learned broker", s.Brokers)
	}
}

func TestParseClientStatsConsumer(t *testing.T) {
	raw := readSample(t, "consumer")
	s, err := ParseClientStats(raw)
	if err != nil {
		t.Fatal(err)
	}
	// The group coordinator is a logical entry for the same broker.
	if s.Type != "consumer" || len(s.Brokers) != 1 || s.Brokers[0].Name != "127.0.0.1:41765" {
		t.Fatalf("type %q, brokers %+v", s.Type, s.Brokers)
	}
	if len(s.Lag) != 1 || s.Lag["items"] != 0 {
		t.Fatalf("lag %v, want items: 0 (read to the end)", s.Lag)
	}

	// The same event with the watermarks moved on, a round trip measured
	// and errors counted: the arithmetic of each field.
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	parts := m["topics"].(map[string]any)["items"].(map[string]any)["partitions"].(map[string]any)
	parts["0"].(map[string]any)["hi_offset"] = 10 // app_offset 3: 7 behind
	p1 := parts["1"].(map[string]any)
	p1["hi_offset"] = 6 // nothing handed over yet: next_offset 2 counts, 4 behind
	p1["app_offset"] = -1001
	parts["-1"].(map[string]any)["hi_offset"] = 100 // the unassigned-messages partition never counts
	b := m["brokers"].(map[string]any)["127.0.0.1:41765/0"].(map[string]any)
	b["txerrs"], b["rxerrs"], b["req_timeouts"] = 2, 3, 4
	b["rtt"].(map[string]any)["avg"], b["rtt"].(map[string]any)["p99"] = 1500, 9000
	m["msg_cnt"], m["msg_size"] = 5, 1234
	moved, _ := json.Marshal(m)
	s, err = ParseClientStats(moved)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lag["items"] != 11 {
		t.Errorf("lag %v, want items: 11", s.Lag)
	}
	want := BrokerStats{Name: "127.0.0.1:41765", RTTAvg: 1500 * time.Microsecond, RTTP99: 9 * time.Millisecond, TxErrs: 2, RxErrs: 3, ReqTimeouts: 4}
	if s.Brokers[0] != want {
		t.Errorf("broker %+v, want %+v", s.Brokers[0], want)
	}
	if s.MsgCnt != 5 || s.MsgSize != 1234 {
		t.Errorf("queue %d/%d, want 5/1234", s.MsgCnt, s.MsgSize)
	}
	if _, err := ParseClientStats([]byte("{")); err == nil {
		t.Error("broken JSON parsed")
	}
}

// Events are parsed when the statistics are read: the latest of each role
// wins, and one that does not parse leaves the role's previous statistics.
func TestRdStatsParsesTheLatestEventWhenRead(t *testing.T) {
	s := NewRdStats()
	if snap := s.Snapshot(); len(snap) != 0 {
		t.Fatalf("statistics before any event: %v", snap)
	}
	s.Record("views", "{") // replaced before it is read
	s.Record("views", string(readSample(t, "consumer")))
	s.Record("producer-all", string(readSample(t, "producer")))
	snap := s.Snapshot()
	if len(snap) != 2 || snap["views"].Type != "consumer" || snap["producer-all"].Type != "producer" {
		t.Fatalf("snapshot %v, want the views' consumer and the producer", snap)
	}
	if again := s.Snapshot(); again["views"] != snap["views"] {
		t.Error("an event parsed twice: a read without a new event should return the same statistics")
	}
	s.Record("views", "{")
	if after := s.Snapshot(); after["views"] != snap["views"] {
		t.Errorf("an event that does not parse replaced the previous statistics: %v", after["views"])
	}
	var none *RdStats
	none.Record("views", "{}") // a client without a store drops its events
}
