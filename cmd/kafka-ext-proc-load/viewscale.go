package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// View scale: a compacted topic of -view-keys keys ×
// -value-size bytes over viewPartitions partitions, read to its end by a
// raw librdkafka consumer with the processor's consumer settings, then by a
// processor whose fetch route views it (GET /big/{id}) beside a view of
// -keys keys (GET /small/{id}); then single-key GETs of both views in
// alternating rounds. The scenario starts a broker and a processor of its
// own in this process (also with -split: the Go heap it measures must be
// the view's), after the shared ones were started, and stops them at its
// end. Before the processor, a second raw read also keeps every record in a
// map[string][]byte: the floor, in time and heap, of any view in Go.
// Then the same views on disk (viewDiskLeg), whose processor runs in a
// child process of its own with -split; -view-disk-only skips the views in
// memory, which cannot hold a view over limits.max-view-bytes.

const (
	viewPartitions = 4
	bigTopic       = "bench-view-big"
	smallTopic     = "bench-view-small"
	// viewsReadyGauge counts the views caught up with their topic.
	viewsReadyGauge = "kafka_ext_proc_views_ready"
	// diskDebtGauge is the compaction backlog of the stores on disk: a
	// first load in bulk is ready before its compaction, which ends it.
	diskDebtGauge = "kafka_ext_proc_view_disk_compaction_debt_bytes"
	// diskBytesGauge is the size of the stores on disk.
	diskBytesGauge = "kafka_ext_proc_view_disk_bytes"
)

const viewScaleYAML = bindingsYAML + `      - when: [{ method: GET, path: "/big/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: ` + bigTopic + `, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/small/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: ` + smallTopic + `, filters: [{ key: "${params.id}" }] }
`

func viewKey(i int) string { return "k" + strconv.Itoa(i) }

func runViewScale(ctx context.Context, e *env, o *options) (_ *Result, err error) {
	res := newResult(scenarioViewScale, false)
	res.param("keys", o.viewKeys)
	res.param("small_keys", o.keys)
	res.param("value_bytes", o.valueSize)
	res.param("partitions", viewPartitions)
	if o.viewDiskOnly {
		res.param("disk_only", true)
	}
	quiet := slog.New(slog.DiscardHandler)
	broker, err := startBroker(quiet,
		brokerTopic{Name: bigTopic, Partitions: viewPartitions, Compact: true}, brokerTopic{Name: smallTopic, Partitions: viewPartitions, Compact: true})
	if err != nil {
		return nil, err
	}
	defer broker.Close()

	t0 := time.Now()
	if err := fillTopic(ctx, broker.Addr(), bigTopic, o.viewKeys, o.valueSize, o.valueRandom); err != nil {
		return nil, err
	}
	res.figure("fill_seconds", time.Since(t0).Seconds()) // the big topic, acknowledged
	if err := fillTopic(ctx, broker.Addr(), smallTopic, o.keys, o.valueSize, o.valueRandom); err != nil {
		return nil, err
	}
	raw, err := rawReadToEnd(ctx, broker.Addr(), bigTopic, o.viewKeys, catchUpFetch(), nil)
	if err != nil {
		return nil, err
	}
	// The raw consumer's read of the big topic to its end.
	res.figure("raw_seconds", raw.Seconds())
	rawDefault, err := rawReadToEnd(ctx, broker.Addr(), bigTopic, o.viewKeys, nil, nil)
	if err != nil {
		return nil, err
	}
	// The same read at librdkafka's default fetch.queue.backoff.ms (1 s),
	// the baseline of the figures before the catch-up took 10 ms.
	res.figure("raw_default_seconds", rawDefault.Seconds())
	liveBytes := bigViewBytes(o)
	res.figure("live_bytes", liveBytes)
	mem := memLeg{raw: raw}
	if !o.viewDiskOnly {
		var stop func()
		mem, stop, err = viewMemLegs(ctx, e, o, broker.Addr(), raw, liveBytes, res)
		if err != nil {
			return nil, err
		}
		defer stop()
		res.ratio("load_default_ratio", ratio(mem.ready.Seconds(), rawDefault.Seconds()), "the same ÷ the raw read at librdkafka's default fetch.queue.backoff.ms", "")
	}
	mem.rawDefault = rawDefault
	if err := viewDiskLeg(ctx, e, o, broker.Addr(), mem, res); err != nil {
		return nil, fmt.Errorf("the view on disk: %w", err)
	}
	return res, nil
}

// viewMemLegs measures the views in memory: the map floor, the load, the
// heap, single-key GETs of both views and the long polls' wake-ups. The
// processor keeps running, for the disk leg's GETs to be set against, until
// stop.
// bigViewBytes is the big view's keys' and values' bytes.
func bigViewBytes(o *options) int64 {
	return int64(o.viewKeys) * int64(len(viewKey(o.viewKeys/2))+o.valueSize)
}

func viewMemLegs(ctx context.Context, e *env, o *options, broker string, raw time.Duration, liveBytes int64, res *Result) (_ memLeg, stop func(), err error) {
	if err := mapFloor(ctx, broker, o.viewKeys, raw, liveBytes, res); err != nil {
		return memLeg{}, nil, err
	}
	cfg, err := viewScaleConfig()
	if err != nil {
		return memLeg{}, nil, err
	}
	before := sampleMemory()
	t0 := time.Now()
	proc, err := stack.StartProcessor(stack.ProcessorOptions{Config: stack.PointAt(cfg, broker), Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return memLeg{}, nil, err
	}
	var s *side
	defer func() {
		if err != nil {
			if s != nil {
				s.close()
			}
			proc.Shutdown(context.Background())
		}
	}()
	if err := awaitGauge(ctx, proc, viewsReadyGauge, 2, 10*time.Minute); err != nil {
		return memLeg{}, nil, err
	}
	ready := time.Since(t0)
	res.figure("ready_seconds", ready.Seconds()) // the processor's start to both views caught up
	// Go heap, live after two collections, with the processor and its
	// views minus before it started. librdkafka's buffers are C memory,
	// not in these figures.
	after := sampleMemory()
	heap := int64(after.Heap) - int64(before.Heap)
	res.figure("heap_bytes", heap)
	res.figure("heap_bytes_per_key", float64(heap)/float64(o.viewKeys))
	res.figure("overhead_bytes_per_key", float64(heap-liveBytes)/float64(o.viewKeys))
	res.target("overhead_bytes_per_key", "≤ 64")
	res.ratio("load_ratio", ratio(ready.Seconds(), raw.Seconds()), "the processor's start to its views ready ÷ the raw consumer's read to the end", "≤ 1.5")
	res.ratio("mem_ratio", ratio(float64(heap), float64(liveBytes)), "the heap the views added ÷ their keys' and values' bytes", "")

	s, err = e.dial("view-scale processor", proc.Addr(), o.conns)
	if err != nil {
		return memLeg{}, nil, err
	}
	if err := viewOneKeyGets(ctx, e, o, s, res); err != nil {
		return memLeg{}, nil, err
	}
	if err := viewWakes(ctx, o, proc, broker, s, res); err != nil {
		return memLeg{}, nil, err
	}
	stop = func() {
		s.close()
		proc.Shutdown(context.Background())
	}
	return memLeg{raw: raw, ready: ready, side: s}, stop, nil
}

// viewOneKeyGets measures single-key GETs of one key in the middle of
// each view in memory, in alternating rounds.
func viewOneKeyGets(ctx context.Context, e *env, o *options, s *side, res *Result) error {
	// A key in the middle of each view; the answer is its value.
	big, small := newRequest(s.client(0), "/big/"+viewKey(o.viewKeys/2)), newRequest(s.client(0), "/small/"+viewKey(o.keys/2))
	check := func(r reply) error {
		if r.status != 200 || len(r.body) != o.valueSize {
			return fmt.Errorf("%d with %d bytes, want 200 with %d", r.status, len(r.body), o.valueSize)
		}
		return nil
	}
	var bw, sw window
	var bRounds, sRounds []float64
	for r := range o.rounds {
		for k := range 2 {
			isBig := (r+k)%2 == 0
			req, w, rounds := small, &sw, &sRounds
			if isBig {
				req, w, rounds = big, &bw, &bRounds
			}
			got, err := e.load(ctx, s, o.clients, o.duration, o.maxReqs, req, check)
			if err != nil {
				return err
			}
			if got.errors > 0 || got.requests == 0 {
				return fmt.Errorf("view-scale GETs (big %v): %d answered, %d failed; first failure: %v", isBig, got.requests, got.errors, got.firstErr)
			}
			w.add(got)
			*rounds = append(*rounds, float64(got.requests)/got.elapsed.Seconds())
		}
	}
	bigGet, smallGet := rateOf(bw, bRounds, false), rateOf(sw, sRounds, false)
	res.figures("big_get", bigGet)
	res.figures("small_get", smallGet)
	res.ratio("get_ratio", ratio(bigGet.PerSecond, smallGet.PerSecond), "single-key GETs per second, big view ÷ small view", "1")
	return nil
}

// memLeg are the figures of the views in memory that the disk leg's are
// set against; with -view-disk-only, raw alone.
type memLeg struct {
	raw, rawDefault, ready time.Duration
	// side is the connections to the processor with the views in memory,
	// still running; nil with -view-disk-only.
	side *side
}

// viewDiskLeg keeps the views on disk, in a new directory: a processor
// loads them from their topics (a first load), serves GETs of the big one
// (one key; keys of a hot set; uniform keys, the page cache dropped, then
// warm) and stops; -keys records of the big topic are written while it is
// down; a processor started on the same stores resumes from them (a
// restart) and reads only those. With -split each processor runs in a child
// process of its own, whose resident memory is reported.
func viewDiskLeg(ctx context.Context, e *env, o *options, broker string, mem memLeg, res *Result) error {
	dir, err := os.MkdirTemp("", "view-scale-stores-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	where := "this process"
	if o.split {
		where = "child process"
	}
	res.param("disk_processor", where)
	// With -split the first start's child writes the run's profiles
	// (see profileDisk); the restart's writes none.
	prof := profiles{}
	if o.profileDisk {
		prof = o.profiles
	}
	start := func() (servers, time.Duration, error) {
		t0 := time.Now()
		srv, err := startViewDisk(ctx, o, dir, broker, prof)
		prof = profiles{}
		if err != nil {
			return nil, 0, err
		}
		if err := awaitServersGauge(ctx, srv, viewsReadyGauge, 2, 10*time.Minute); err != nil {
			srv.close()
			return nil, 0, err
		}
		return srv, time.Since(t0), nil
	}
	srv, first, err := start()
	if err != nil {
		return err
	}
	res.figure("disk_first_load_seconds", first.Seconds())
	res.ratio("disk_load_ratio", ratio(first.Seconds(), mem.raw.Seconds()), "start to the views on disk ready, from empty stores ÷ the raw read", "≤ 1.5")
	res.ratio("disk_load_default_ratio", ratio(first.Seconds(), mem.rawDefault.Seconds()), "the same ÷ the raw read at librdkafka's default fetch.queue.backoff.ms", "")
	// The GETs are of the settled store: its first load's compaction,
	// which runs once the view is ready, is over (its time is a figure
	// of its own: look-ups meanwhile consult more tables).
	t0 := time.Now()
	if err := awaitServersGauge(ctx, srv, diskDebtGauge, 0, 10*time.Minute); err != nil {
		srv.close()
		return err
	}
	res.figure("disk_settle_seconds", time.Since(t0).Seconds())
	stored, err := srv.gauge(ctx, diskBytesGauge)
	if err != nil {
		srv.close()
		return err
	}
	res.figure("disk_store_mib", mib(uint64(stored)))
	res.ratio("disk_store_ratio", ratio(float64(stored), float64(bigViewBytes(o))), "the stores' size on disk, settled ÷ the big view's keys' and values' bytes", "")
	err = viewDiskGets(ctx, e, o, srv, dir, mem, res)
	srv.close()
	if err != nil {
		return err
	}
	if o.profileDisk && o.profiles.Trace != "" {
		// The child wrote its trace as it stopped.
		ct, err := readCatchUpTrace(o.profiles.Trace)
		if err != nil {
			return err
		}
		ct.figures(res)
	}

	if err := fillTopic(ctx, broker, bigTopic, o.keys, o.valueSize, o.valueRandom); err != nil {
		return err
	}
	srv, restart, err := start()
	if err != nil {
		return err
	}
	err = reportResident(ctx, srv, "disk_restart", "", res)
	srv.close()
	if err != nil {
		return err
	}
	res.figure("disk_restart_seconds", restart.Seconds())
	if mem.ready > 0 {
		res.ratio("disk_restart_ratio", ratio(restart.Seconds(), mem.ready.Seconds()),
			"a restart on the stores to ready (catching up -keys records written while down) ÷ the views' load into memory", "")
	}
	return nil
}

// viewDiskGets serves GETs of the big view on disk from srv: one key, a hot
// set, uniform keys; then its resident memory, at the peak of the load and
// the GETs, and after them.
func viewDiskGets(ctx context.Context, e *env, o *options, srv servers, dir string, mem memLeg, res *Result) error {
	s, err := e.dial("view-scale processor on disk", srv.processorAddr(), o.conns)
	if err != nil {
		return err
	}
	defer s.close()
	// One key, on disk and in memory in the same rounds: measured minutes
	// apart, as they were, the ratio took the machine's drift between them
	// (0.58 – 1.09 × over five runs).
	rates, err := keyedRounds(ctx, o, sidesOf(mem.side, s), oneKeyPicker(s.client(0), o.viewKeys/2))
	if err != nil {
		return fmt.Errorf("one key of the big view: %w", err)
	}
	d := rates[len(rates)-1]
	if mem.side != nil {
		res.figures("mem_one_get", rates[0])
	}
	res.figures("disk_one_get", d)
	if mem.side != nil {
		of, target := versusMemory(o, "single-key GETs per second of one key, big view on disk ÷ in memory, in the same rounds", "≥ 0.8")
		res.ratio("disk_get_ratio", ratio(d.PerSecond, rates[0].PerSecond), of, target)
	}
	if err := hotGets(ctx, o, mem.side, s, res); err != nil {
		return err
	}
	if err := uniformGets(ctx, o, mem.side, s, dir, res); err != nil {
		return err
	}
	// The bound: a view of 4,000,000 keys × 1 KiB served in 768 MiB.
	return reportResident(ctx, srv, "disk", "≤ 768", res)
}

// viewWakes times a long poll on a key of each view in turn, woken by a
// write, viewWakeRounds times, and adds the medians.
func viewWakes(ctx context.Context, o *options, proc *stack.Processor, broker string, s *side, res *Result) error {
	w, err := newFanoutWriter(broker)
	if err != nil {
		return err
	}
	defer w.close()
	var bigWake, smallWake []time.Duration
	for r := range viewWakeRounds {
		for _, isBig := range []bool{r%2 == 0, r%2 != 0} {
			topic, path, key := smallTopic, "/small/", viewKey(o.keys/2)
			if isBig {
				topic, path, key = bigTopic, "/big/", viewKey(o.viewKeys/2)
			}
			d, err := wakeOnce(ctx, proc, s, w.prod, topic, path+key, key, r+2, o.valueSize)
			if err != nil {
				return err
			}
			if isBig {
				bigWake = append(bigWake, d)
			} else {
				smallWake = append(smallWake, d)
			}
		}
	}
	bigWakeMs, smallWakeMs := ms(median(bigWake)), ms(median(smallWake))
	res.figure("big_wake_ms", bigWakeMs)
	res.figure("small_wake_ms", smallWakeMs)
	res.ratio("wake_ratio", ratio(bigWakeMs, smallWakeMs), "a long poll's wake-up by a write, big view ÷ small view", "1")
	return nil
}

// viewWakeRounds is how many wake-ups view-scale times on each view.
const viewWakeRounds = 5

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// wakeOnce holds one long poll on path (if-none-match its current tag),
// waits until the processor counts it, writes version seq of key, and
// returns the time from the write's produce call to the answer, which must
// be 200 with the new value.
func wakeOnce(ctx context.Context, proc *stack.Processor, s *side, prod *kafka.Producer, topic, path, key string, seq, size int) (time.Duration, error) {
	first, err := exchange(ctx, s.client(0), newRequest(s.client(0), path))
	if err != nil || first.status != 200 || first.header("etag") == "" {
		return 0, fmt.Errorf("GET %s: %d, etag %q, %v", path, first.status, first.header("etag"), err)
	}
	want := jsonValue(key, seq, size)
	got := make(chan outcome, 1)
	go func() {
		rep, err := exchange(ctx, s.client(0), newRequest(s.client(0), path, "if-none-match", first.header("etag"), "prefer", "wait=60"))
		got <- outcome{rep, err}
	}()
	if err := awaitGauge(ctx, proc, waitersGauge, 1, time.Minute); err != nil {
		return 0, err
	}
	t0 := time.Now()
	err = prod.Produce(&kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            []byte(key), Value: want,
		Headers: []kafka.Header{{Key: "content-type", Value: []byte("application/json")}},
	}, nil)
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", topic, err)
	}
	select {
	case o := <-got:
		if o.err != nil || o.rep.status != 200 || !bytes.Equal(o.rep.body, want) {
			return 0, fmt.Errorf("the long poll on %s: %d with %q, %v; want 200 with the new value", path, o.rep.status, o.rep.body, o.err)
		}
		return o.rep.at.Sub(t0), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("the long poll on %s: %w", path, ctx.Err())
	}
}

// fillTopic writes n records (keys viewKey(i), JSON values of size bytes,
// content-type application/json; random: see randomValue) and returns once
// all were acknowledged.
func fillTopic(ctx context.Context, broker, topic string, n, size int, random bool) error {
	return fillTopics(ctx, broker, n, size, random, func(i int) (string, string) { return topic, viewKey(i) })
}

// randomValue is jsonValue with its pad of random letters, digits, '-'
// and '_' (six bits in a byte: snappy finds nothing to compress), the same
// for the same key and seq.
func randomValue(key string, seq, size int) []byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	v := jsonValue(key, seq, size)
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(seq)))
	start := bytes.Index(v, []byte(`"pad":"`)) + len(`"pad":"`)
	for i := start; i < len(v)-len(`"}`); i++ {
		v[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return v
}

// fillTopics writes n records, record i to the topic and key rec names,
// as fillTopic does.
func fillTopics(ctx context.Context, broker string, n, size int, random bool, rec func(i int) (topic, key string)) error {
	value := jsonValue
	if random {
		value = randomValue
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"acks": "1", "linger.ms": 20, "go.delivery.report.fields": "none",
	})
	if err != nil {
		return fmt.Errorf("the view-scale writer: %w", err)
	}
	defer p.Close()
	acked := make(chan error, 1)
	go func() {
		var first error
		for i := 0; i < n; {
			ev, ok := <-p.Events()
			if !ok {
				acked <- errors.New("the producer closed before every record was acknowledged")
				return
			}
			if m, ok := ev.(*kafka.Message); ok {
				if m.TopicPartition.Error != nil && first == nil {
					first = m.TopicPartition.Error
				}
				i++
			}
		}
		acked <- first
	}()
	hdr := []kafka.Header{{Key: "content-type", Value: []byte("application/json")}}
	for i := 0; i < n; {
		topic, k := rec(i)
		err := p.Produce(&kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key:            []byte(k), Value: value(k, 1, size), Headers: hdr,
		}, nil)
		switch {
		case err == nil:
			i++
		case kafkaErrCode(err) == kafka.ErrQueueFull:
			p.Flush(100) // room for more
		default:
			return fmt.Errorf("writing %s: %w", topic, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	select {
	case err := <-acked:
		if err != nil {
			return fmt.Errorf("writing %d records: %w", n, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("writing %d records: %w", n, ctx.Err())
	}
}

func kafkaErrCode(err error) kafka.ErrorCode {
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke.Code()
	}
	return kafka.ErrUnknown
}

// mapFloor reads the big topic as rawReadToEnd does, keeping every record's
// value by its key in a map, the floor of any view in Go, and records the
// time against raw (the read without the map) and the map's heap per key
// beyond liveBytes, the keys' and values' bytes.
func mapFloor(ctx context.Context, broker string, n int, raw time.Duration, liveBytes int64, res *Result) error {
	before := sampleMemory()
	m := make(map[string][]byte)
	d, err := rawReadToEnd(ctx, broker, bigTopic, n, catchUpFetch(), func(k, v []byte) { m[string(k)] = v })
	if err != nil {
		return err
	}
	after := sampleMemory()
	if len(m) != n {
		return fmt.Errorf("the map floor holds %d keys, want %d", len(m), n)
	}
	res.figure("map_seconds", d.Seconds())
	res.figure("map_overhead_bytes_per_key", float64(int64(after.Heap)-int64(before.Heap)-liveBytes)/float64(n))
	res.ratio("map_load_ratio", ratio(d.Seconds(), raw.Seconds()), "the raw read into a map ÷ the raw read", "")
	runtime.KeepAlive(m)
	return nil
}

// catchUpFetch is the fetch setting of the processor's catch-up consumers
// that librdkafka's defaults do not have.
func catchUpFetch() kafka.ConfigMap {
	const name = "fetch.queue.backoff.ms"
	return kafka.ConfigMap{name: (*client.CatchUpConfig(nil, 0, ""))[name]}
}

// rawReadToEnd reads topic from its start to the end of every partition
// with the processor's consumer settings (its Kafka consumers':
// assignment only, partition EOF events, fetch.wait.max.ms 100), as a view
// catching up does, and settings (catchUpFetch: the catch-up's; nil:
// librdkafka's defaults), and returns how long it took; it fails unless it
// read n records. keep, if not nil, is given each record's key and value.
func rawReadToEnd(ctx context.Context, broker, topic string, n int, settings kafka.ConfigMap, keep func(key, value []byte)) (time.Duration, error) {
	cm := kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"group.id": "kafka-ext-proc-load-view-scale", "enable.auto.commit": false, "enable.auto.offset.store": false,
		"enable.partition.eof": true, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
	}
	for k, v := range settings {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return 0, fmt.Errorf("the raw view-scale consumer: %w", err)
	}
	defer func() { _ = c.Close() }()
	t0 := time.Now()
	parts, err := endOffsets(c, topic)
	if err != nil {
		return 0, err
	}
	for i := range parts {
		parts[i].Offset = kafka.OffsetBeginning
	}
	if err := c.Assign(parts); err != nil {
		return 0, err
	}
	read, atEnd := 0, map[int32]bool{}
	for len(atEnd) < len(parts) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error == nil {
				read++
				if keep != nil {
					keep(ev.Key, ev.Value)
				}
			}
		case kafka.PartitionEOF:
			atEnd[ev.Partition] = true
		case kafka.Error:
			return 0, fmt.Errorf("reading %s: %w", topic, ev)
		}
	}
	d := time.Since(t0)
	if read != n {
		return 0, fmt.Errorf("reading %s to its end: %d records, want %d", topic, read, n)
	}
	return d, nil
}

// awaitGauge polls one of the processor's gauges until it reaches want.
func awaitGauge(ctx context.Context, p *stack.Processor, name string, want int64, bound time.Duration) error {
	return pollGauge(ctx, name, want, bound, func(context.Context) (int64, error) { return gauge(p.Registry, name) })
}

// pollGauge reads a gauge until it reaches want (rising to it, or falling
// to it when want is 0), within bound. A read gathers every metric of the
// processor (about a millisecond of its CPU, more with views on disk), so
// the reads are spaced by a 500th of the time waited so far, from 10 ms to
// 250 ms: read every 10 ms, a first load of 4,000,000 keys and its
// compaction paid 6 s of the processor's CPU for them, and the wait
// overshoots by at most 0.2 % of it.
func pollGauge(ctx context.Context, name string, want int64, bound time.Duration, read func(context.Context) (int64, error)) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	for {
		v, err := read(ctx)
		if err == nil && (v >= want && want > 0 || v == want) {
			return nil
		}
		select {
		case <-time.After(min(max(time.Since(start)/500, 10*time.Millisecond), 250*time.Millisecond)):
		case <-ctx.Done():
			return fmt.Errorf("%s did not reach %d in time (last %d, %v): %w", name, want, v, err, ctx.Err())
		}
	}
}
