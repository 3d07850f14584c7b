package stack

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
)

// replyReadBackMetrics are the reply index's evicted ids, which it holds as
// locations in their reply topic and reads back when a replay or a
// follow-up asks for them: how many and their bytes, the read-backs by
// outcome and their latency.
type replyReadBackMetrics struct {
	locations, locationBytes, readBacks, latency *prometheus.Desc
}

func newReplyReadBackMetrics() replyReadBackMetrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"kafka"}, labels...), nil)
	}
	return replyReadBackMetrics{
		locations: d("kafka_ext_proc_reply_index_locations",
			"Correlation ids evicted for reply-index-bytes and held as the location of their replies in the reply topic, read back when asked for."),
		locationBytes: d("kafka_ext_proc_reply_index_location_bytes", "Bytes accounted to the locations of evicted replies."),
		readBacks: d("kafka_ext_proc_reply_index_read_backs_total",
			"Evicted replies read back from their reply topic for a replay or a follow-up, by result: found, expired (no longer in the topic: answered 410 / FAILED_PRECONDITION), failed (Kafka did not answer within kafka-timeout: 503 / UNAVAILABLE).", "result"),
		latency: d("kafka_ext_proc_reply_index_read_back_seconds", "Time from the first ask for an evicted reply to the end of its read-back."),
	}
}

func (m replyReadBackMetrics) describe(ch chan<- *prometheus.Desc) {
	ch <- m.locations
	ch <- m.locationBytes
	ch <- m.readBacks
	ch <- m.latency
}

func (m replyReadBackMetrics) collect(ch chan<- prometheus.Metric, name string, rs replies.Stats) {
	ch <- prometheus.MustNewConstMetric(m.locations, prometheus.GaugeValue, float64(rs.Located), name)
	ch <- prometheus.MustNewConstMetric(m.locationBytes, prometheus.GaugeValue, float64(rs.LocatedBytes), name)
	for result, n := range map[string]uint64{"found": rs.ReadBacksFound, "expired": rs.ReadBacksExpired, "failed": rs.ReadBacksFailed} {
		ch <- prometheus.MustNewConstMetric(m.readBacks, prometheus.CounterValue, float64(n), name, result)
	}
	h := rs.ReadBackLatency
	ch <- prometheus.MustNewConstHistogram(m.latency, h.Count, h.Sum.Seconds(), h.Buckets, name)
}
