package httpkafka

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httphdr"
)

// Benchmarks of the fetch answer's parts that need no Kafka: rendering
// (single record and merged), entity tags (formatting and parsing) and the
// per-request selection. A populated views.View can only be built by
// consuming a topic (its constructor and apply are internal to kafkaio), so
// Fetch.answer as a whole (view look-up or scan, sort, render, cache) is not
// measured here: kafkaio's view benchmarks measure the look-up and the scan,
// these the rest. The view passed to the render and tag functions is the
// zero View: they read only its topic id (all zeros, the same length).

const benchFetchConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: /items }]
        exit: kafka0
        with: { capability: fetch, topic: items, merge: { content-type: application/json } }
`

func benchFetch(b *testing.B, route int) *Fetch {
	b.Helper()
	cfg, err := config.Parse("bench.yaml", []byte(benchFetchConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		b.Fatal(err)
	}
	for _, bd := range cfg.Bindings {
		if bd.Name == "http0" {
			return NewFetch(bd.Routes[route].With, nil)
		}
	}
	b.Fatal("no binding http0")
	return nil
}

// benchEntries are n entries of 200-byte JSON values on 12 partitions, in
// (partition, offset) order as Fetch.matching returns them.
func benchEntries(n int) []views.Entry {
	const partitions = 12
	out := make([]views.Entry, 0, n)
	for p := range partitions {
		for i := p; i < n; i += partitions {
			key := fmt.Sprintf("item-%06d", i)
			v := fmt.Appendf(nil, `{"id":"%s","n":%d,"pad":"`, key, i)
			for len(v) < 198 {
				v = append(v, 'x')
			}
			v = append(v, '"', '}')
			out = append(out, views.Entry{Partition: int32(p), Offset: int64(1_000_000 + i/partitions),
				Timestamp: 1_760_000_000_000, Key: key, Value: v})
		}
	}
	return out
}

// BenchmarkRenderMerged renders the JSON array of a merged fetch and its
// tag: once per view version and selection (the result is cached).
func BenchmarkRenderMerged(b *testing.B) {
	view := &views.View{}
	for _, n := range []int{100, 1_000} {
		entries := benchEntries(n)
		ans := renderMerged(view, entries)
		var arr []json.RawMessage
		if err := json.Unmarshal(ans.body, &arr); err != nil || len(arr) != n || ans.status != http.StatusOK {
			b.Fatalf("%d entries rendered %d (%v), status %d", n, len(arr), err, ans.status)
		}
		b.Run("keys="+strconv.Itoa(n)+"x200B", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ans.body)))
			for b.Loop() {
				renderMerged(view, entries)
			}
		})
	}
}

// BenchmarkMergedTag is the tag of a merged answer alone (part of
// BenchmarkRenderMerged).
func BenchmarkMergedTag(b *testing.B) {
	view := &views.View{}
	entries := benchEntries(1_000)
	tag := mergedTag(view, entries)
	if offs, ok := tagOffsets(view, tag); !ok || len(offs) != 12 {
		b.Fatalf("tag %q parses to %v, %v", tag, offs, ok)
	}
	b.ReportAllocs()
	for b.Loop() {
		mergedTag(view, entries)
	}
}

// BenchmarkRenderSingle renders a single-key answer: winner, tag, content
// type. It runs on every single-key fetch (those are not cached). The
// entry has no headers (kafkaio builds them only from records); see
// kafkaio's BenchmarkEntryHeader for the header look-ups it adds.
func BenchmarkRenderSingle(b *testing.B) {
	view := &views.View{}
	entries := benchEntries(1)
	ans := renderSingle(view, entries)
	if ans.status != http.StatusOK || ans.tag != "AAAAAAAAAAA.0.1000000" || len(ans.body) != 200 {
		b.Fatalf("answer %+v", ans)
	}
	b.ReportAllocs()
	for b.Loop() {
		renderSingle(view, entries)
	}
}

// BenchmarkSingleTag formats the tag of a single record, without and with
// the record's own etag header.
func BenchmarkSingleTag(b *testing.B) {
	view := &views.View{}
	e := &benchEntries(1)[0]
	for _, tc := range []struct{ name, rec, want string }{
		{"plain", "", "AAAAAAAAAAA.0.1000000"},
		{"record-etag", "v42", "AAAAAAAAAAA.0.1000000/v42"},
	} {
		if got := singleTag(view, e, tc.rec); got != tc.want {
			b.Fatalf("singleTag = %q, want %q", got, tc.want)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				singleTag(view, e, tc.rec)
			}
		})
	}
}

// BenchmarkTagOffsets parses a client's tag back into offsets: every
// request with if-none-match does so (waitUntilCaughtUp).
func BenchmarkTagOffsets(b *testing.B) {
	view := &views.View{}
	single := singleTag(view, &benchEntries(1)[0], "v42")
	merged := mergedTag(view, benchEntries(1_000))
	for _, tc := range []struct {
		name, tag  string
		partitions int
	}{{"single", single, 1}, {"merged-12-partitions", merged, 12}, {"foreign", "W/xyz", 0}} {
		offs, ok := tagOffsets(view, tc.tag)
		if len(offs) != tc.partitions || ok != (tc.partitions > 0) {
			b.Fatalf("tagOffsets(%q) = %v, %v", tc.tag, offs, ok)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tagOffsets(view, tc.tag)
			}
		})
	}
}

// BenchmarkFetchSelection resolves a route's filters for one request: the
// single-key route GET /items/{id} and the merged route without filters.
func BenchmarkFetchSelection(b *testing.B) {
	params := map[string]string{"id": "item-000042"}
	resolve := func(p config.TemplatePart) string {
		if p.Ref == config.RefParam {
			return params[p.Name]
		}
		return ""
	}
	for _, tc := range []struct {
		name  string
		route int
	}{{"single-key", 0}, {"merged", 1}} {
		f := benchFetch(b, tc.route)
		sel := f.selection(resolve)
		if tc.route == 0 && (!sel.keyOnly || len(sel.filters) != 1 || *sel.filters[0].key != "item-000042") {
			b.Fatalf("selection %+v", sel)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f.selection(resolve)
			}
		})
	}
}

// BenchmarkAnswerReply builds the response of a 200 answer (content type,
// quoted etag) and of a 304 to a matching if-none-match.
func BenchmarkAnswerReply(b *testing.B) {
	ans := renderSingle(&views.View{}, benchEntries(1))
	if r := ans.reply(""); r.Status != http.StatusOK || len(r.Headers) != 2 || r.Headers[1].Value != httphdr.Quote(ans.tag) {
		b.Fatalf("reply %+v", r)
	}
	b.Run("200", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ans.reply("")
		}
	})
	b.Run("304-wait", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			notModified(ans, "wait=30")
		}
	})
}
