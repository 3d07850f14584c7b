package client

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"
)

// DefaultStatisticsInterval is librdkafka's statistics.interval.ms on every
// long-lived client unless the binding's options set it (0 turns the
// statistics off). Short-lived consumers (view catch-ups, history reads)
// never emit statistics.
const DefaultStatisticsInterval = 15 * time.Second

// ClientStats are the parts of one librdkafka statistics event
// (https://github.com/confluentinc/librdkafka/blob/master/STATISTICS.md) the
// metrics report.
type ClientStats struct {
	Type string // producer or consumer
	// MsgCnt and MsgSize are the messages (and their bytes) in the client's
	// queues: for a producer, waiting to be sent or acknowledged.
	MsgCnt  int64
	MsgSize int64
	Brokers []BrokerStats // brokers of the cluster (learned or configured), by name
	// Lag is, per topic the client consumes, the records the brokers hold
	// beyond what the client has handed to us: the sum over its fetched
	// partitions of the high watermark less the next offset. Partitions not
	// fetched, or whose watermark is not known yet, count nothing.
	Lag map[string]int64
}

// BrokerStats are one broker's connection statistics.
type BrokerStats struct {
	Name        string        // host:port
	RTTAvg      time.Duration // request round-trip time over the last interval (0: no request)
	RTTP99      time.Duration
	TxErrs      uint64 // transmission errors since the client started
	RxErrs      uint64 // receive errors since the client started
	ReqTimeouts uint64 // requests timed out since the client started
}

// rdStatsJSON is the subset of librdkafka's statistics that is read.
type rdStatsJSON struct {
	Type    string `json:"type"`
	MsgCnt  int64  `json:"msg_cnt"`
	MsgSize int64  `json:"msg_size"`
	Brokers map[string]struct {
		NodeID      int32  `json:"nodeid"`
		NodeName    string `json:"nodename"`
		Source      string `json:"source"`
		TxErrs      uint64 `json:"txerrs"`
		RxErrs      uint64 `json:"rxerrs"`
		ReqTimeouts uint64 `json:"req_timeouts"`
		RTT         struct {
			Avg int64 `json:"avg"` // microseconds
			P99 int64 `json:"p99"`
		} `json:"rtt"`
	} `json:"brokers"`
	Topics map[string]struct {
		Partitions map[string]struct {
			Partition  int32  `json:"partition"`
			FetchState string `json:"fetch_state"`
			NextOffset int64  `json:"next_offset"`
			AppOffset  int64  `json:"app_offset"`
			HiOffset   int64  `json:"hi_offset"`
		} `json:"partitions"`
	} `json:"topics"`
}

// ParseClientStats reads one librdkafka statistics event (kafka.Stats's
// text).
func ParseClientStats(data []byte) (*ClientStats, error) {
	var raw rdStatsJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parsing librdkafka statistics: %w", err)
	}
	s := &ClientStats{Type: raw.Type, MsgCnt: raw.MsgCnt, MsgSize: raw.MsgSize}
	for _, b := range raw.Brokers {
		// Bootstrap entries (no node id yet) and logical ones (the group
		// coordinator) duplicate a broker.
		if b.NodeID < 0 || b.Source == "logical" || b.Source == "internal" {
			continue
		}
		s.Brokers = append(s.Brokers, BrokerStats{
			Name:   b.NodeName,
			RTTAvg: time.Duration(b.RTT.Avg) * time.Microsecond, RTTP99: time.Duration(b.RTT.P99) * time.Microsecond,
			TxErrs: b.TxErrs, RxErrs: b.RxErrs, ReqTimeouts: b.ReqTimeouts,
		})
	}
	sort.Slice(s.Brokers, func(i, j int) bool { return s.Brokers[i].Name < s.Brokers[j].Name })
	if raw.Type == "consumer" {
		s.Lag = map[string]int64{}
		for topic, t := range raw.Topics {
			lag, fetched := int64(0), false
			for _, p := range t.Partitions {
				if p.Partition < 0 || p.FetchState == "none" || p.FetchState == "stopped" || p.FetchState == "stopping" {
					continue // not assigned (or the unassigned-messages partition)
				}
				fetched = true
				pos := p.AppOffset // the next offset after the last record handed over
				if pos < 0 {
					pos = p.NextOffset // nothing handed over since the assignment
				}
				if p.HiOffset < 0 || pos < 0 {
					continue
				}
				lag += max(p.HiOffset-pos, 0)
			}
			if fetched {
				s.Lag[topic] = lag
			}
		}
	}
	return s, nil
}

// RdStats keeps the latest statistics of each long-lived librdkafka client
// of a cluster, by role (views, replies, log-tail, producer-<acks>).
//
// An event is kept as librdkafka wrote it and parsed when the statistics
// are read (a metrics scrape), once: the live consumer's event lists every
// partition of every view (2.3 MB of JSON with 1,000 views, 25 ms to parse),
// which a quiet processor nobody scrapes spent a sixth of a percent of a
// core parsing every interval.
type RdStats struct {
	// parseMu makes Snapshots one at a time: a later event is never
	// replaced by an earlier one another Snapshot parsed more slowly.
	parseMu sync.Mutex
	mu      sync.Mutex
	pending map[string]string // the latest event of a role, not parsed yet
	latest  map[string]*ClientStats
}

// NewRdStats returns an empty store.
func NewRdStats() *RdStats {
	return &RdStats{pending: map[string]string{}, latest: map[string]*ClientStats{}}
}

// record keeps a statistics event of a client, replacing one not read yet.
// A nil store drops it.
func (s *RdStats) Record(role, data string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[role] = data
}

// Snapshot returns the latest statistics by role (the values are not
// modified afterwards: each event replaces them). Events that do not parse
// (a librdkafka that writes other JSON) leave a role's previous statistics,
// and nothing else breaks. Parsing happens outside the lock, so clients
// recording events never wait for it.
func (s *RdStats) Snapshot() map[string]*ClientStats {
	s.parseMu.Lock()
	defer s.parseMu.Unlock()
	s.mu.Lock()
	raw := s.pending
	if len(raw) > 0 {
		s.pending = map[string]string{}
	}
	s.mu.Unlock()
	parsed := make(map[string]*ClientStats, len(raw))
	for role, data := range raw {
		if st, err := ParseClientStats([]byte(data)); err == nil {
			parsed[role] = st
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for role, st := range parsed {
		s.latest[role] = st
	}
	out := make(map[string]*ClientStats, len(s.latest))
	for k, v := range s.latest {
		out[k] = v
	}
	return out
}
