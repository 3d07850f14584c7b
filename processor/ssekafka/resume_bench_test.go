package ssekafka

import (
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// What a resume costs the binding itself, beside the shared path
// (kafkaio/logtails BenchmarkResume: the position's check and the read):
// reading last-event-id, and rendering the missed records as events. A
// gRPC fetch stream reads its last-message-id with the same parser and
// sends the frames as they are, so the rendering is what SSE adds.

func BenchmarkLastEventID(b *testing.B) {
	for _, partitions := range []int{1, 16} {
		next := make([]int64, partitions)
		for p := range next {
			next[p] = 1_000_000 + int64(p)
		}
		h := route.Headers{{Name: "accept", Value: eventStream},
			{Name: "last-event-id", Value: base64.StdEncoding.EncodeToString(grpcwire.AppendMessageID(nil, next))}}
		b.Run(fmt.Sprintf("%d partitions", partitions), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if start, problem := lastEventID(h); problem != nil || len(start) != partitions {
					b.Fatal(problem)
				}
			}
		})
	}
}

// BenchmarkRenderMissed renders 10 missed records of 100 bytes, one chunk
// as the log stream hands them on.
func BenchmarkRenderMissed(b *testing.B) {
	const missed = 10
	var chunk []byte
	value := make([]byte, 100)
	for i := range value {
		value[i] = 'x'
	}
	for i := range missed {
		chunk = frame{}.AppendFrame(chunk, value, []int64{1_000_000 + int64(i)})
	}
	var dst []byte
	b.ReportAllocs()
	for range b.N {
		var n int
		var err error
		if dst, n, err = appendEvents(dst[:0], chunk); err != nil || n != missed {
			b.Fatal(n, err)
		}
	}
}
