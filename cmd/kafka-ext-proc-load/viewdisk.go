package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// The views on disk beyond one key: GETs of keys drawn per request from a
// hot set, and from the whole view (with the kernel's page cache dropped,
// then warm), on the views on disk and, when they run, in memory; and the
// resident memory of a processor serving a view on disk when it runs in a
// process of its own (-split).

// hotKeys is the size of the hot set of the hot GETs (at most -view-keys).
const hotKeys = 10_000

// viewScaleConfig parses view-scale's configuration.
func viewScaleConfig() (*config.Config, error) {
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Parse("view-scale.yaml", []byte(viewScaleYAML), noEnv)
	if err != nil {
		return nil, fmt.Errorf("the view-scale configuration: %w", err)
	}
	return cfg, nil
}

// startViewDiskLocal starts view-scale's processor with its views on disk
// in dir, against the broker at broker, and nothing else: a child's
// servers (childConfig.ViewStore), or the disk leg's in this process.
func startViewDiskLocal(logger *slog.Logger, dir, broker string) (*local, error) {
	cfg, err := viewScaleConfig()
	if err != nil {
		return nil, err
	}
	k := *cfg.Kafka["kafka0"]
	k.ViewStore = config.ViewStore{Disk: true, Directory: dir}
	cfg.Kafka["kafka0"] = &k
	proc, err := stack.StartProcessor(stack.ProcessorOptions{Config: stack.PointAt(cfg, broker), Listen: "127.0.0.1:0",
		Logger: logger.With("component", "processor")})
	if err != nil {
		return nil, fmt.Errorf("starting the processor with its views on disk: %w", err)
	}
	return &local{log: logger, brokerAt: broker, proc: proc}, nil
}

// startViewDisk starts the disk leg's processor: in a child process of its
// own with -split, so its resident set holds the processor alone (this
// process holds the broker, which keeps every record in memory, and the
// clients), else in this process. prof are the child's profiles.
func startViewDisk(ctx context.Context, o *options, dir, broker string, prof profiles) (servers, error) {
	if !o.split {
		return startViewDiskLocal(slog.New(slog.DiscardHandler), dir, broker)
	}
	c, err := startChild(ctx, childConfig{LogLevel: o.logLevel.String(), Broker: broker, ViewStore: dir, Profiles: prof})
	if err != nil {
		return nil, err // not a nil *child in the interface
	}
	return c, nil
}

// awaitServersGauge polls one of the processor's gauges, wherever it
// runs, until it reaches want.
func awaitServersGauge(ctx context.Context, srv servers, name string, want int64, bound time.Duration) error {
	return pollGauge(ctx, name, want, bound, func(ctx context.Context) (int64, error) { return srv.gauge(ctx, name) })
}

// reportResident adds the disk processor's resident set, at its peak so
// far (VmHWM: loading and serving alike) and now, and its live heap, as
// figures prefixed name, when it runs in a process of its own; else nothing (this process
// holds the broker and the clients too). peakTarget is the peak's bound.
func reportResident(ctx context.Context, srv servers, name, peakTarget string, res *Result) error {
	m, ok, err := srv.memory(ctx, "")
	if err != nil || !ok {
		return err
	}
	if m.PeakRSS > 0 {
		res.figure(name+"_peak_rss_mib", mib(m.PeakRSS))
		res.target(name+"_peak_rss_mib", peakTarget)
	}
	if m.RSS > 0 {
		res.figure(name+"_rss_mib", mib(m.RSS))
	}
	// The live Go heap now, after two collections, and all the Go runtime
	// holds: the rest of the resident set is librdkafka's buffers and the
	// store's block cache and memtables, outside the Go heap.
	res.figure(name+"_heap_mib", mib(m.Heap))
	res.figure(name+"_go_held_mib", mib(m.GoHeld))
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// keyedGet is one GET of the big view and the key it asks for.
type keyedGet struct {
	req emulator.Request
	key string
}

// keyPicker chooses the GET of one exchange from the worker's own source.
type keyPicker func(r *rand.Rand) keyedGet

// hotPicker draws from n distinct keys of the view's n keys, chosen at
// random, their requests built beforehand: the loop only indexes.
func hotPicker(c *emulator.Client, n, viewKeys int) keyPicker {
	r := rand.New(rand.NewPCG(1, 2)) // the same hot set every run
	var idx []int
	if n >= viewKeys {
		idx = make([]int, viewKeys)
		for i := range idx {
			idx[i] = i
		}
	} else {
		seen := make(map[int]bool, n)
		for len(idx) < n {
			if i := r.IntN(viewKeys); !seen[i] {
				seen[i] = true
				idx = append(idx, i)
			}
		}
	}
	gets := make([]keyedGet, len(idx))
	for j, i := range idx {
		k := viewKey(i)
		gets[j] = keyedGet{newRequest(c, "/big/"+k), k}
	}
	return func(r *rand.Rand) keyedGet { return gets[r.IntN(len(gets))] }
}

// oneKeyPicker asks for the view's key i every time.
func oneKeyPicker(c *emulator.Client, i int) keyPicker {
	k := viewKey(i)
	g := keyedGet{newRequest(c, "/big/"+k), k}
	return func(*rand.Rand) keyedGet { return g }
}

// uniformPicker draws any of the view's n keys. Its requests cannot all be
// built beforehand (4,000,000 of them), so each is a copy of one built
// request with its path replaced: two small allocations, beside the
// hundreds of an exchange.
func uniformPicker(c *emulator.Client, n int) keyPicker {
	tmpl := newRequest(c, "/big/"+viewKey(0))
	at := slices.IndexFunc(tmpl.Headers, func(h emulator.Header) bool { return h.Key == ":path" })
	return func(r *rand.Rand) keyedGet {
		k := viewKey(r.IntN(n))
		h := slices.Clone(tmpl.Headers)
		h[at].Value = "/big/" + k
		return keyedGet{emulator.Request{Headers: h, EndOfStream: tmpl.EndOfStream, Route: tmpl.Route}, k}
	}
}

// checkValue accepts a 200 with the key's value: size bytes, naming key
// (jsonValue), so a store answering another key's value fails the run.
func checkValue(r reply, key string, size int) error {
	const head = `{"id":"`
	b := r.body
	if r.status != 200 || len(b) != size || len(b) < len(head)+len(key)+1 ||
		string(b[:len(head)]) != head || string(b[len(head):len(head)+len(key)]) != key || b[len(head)+len(key)] != '"' {
		return fmt.Errorf("GET of %s: %d with %d bytes %.40q…, want 200 with its value of %d bytes", key, r.status, len(b), b, size)
	}
	return nil
}

// getWindow is the tally of keyed GETs in one window.
type getWindow struct {
	exchanges
	elapsed time.Duration
}

// keyedLoad runs clients concurrent loops of GETs chosen by pick for d (or
// until budget requests were sent), client i on connection i mod conns,
// timing each exchange.
func keyedLoad(ctx context.Context, s *side, clients int, d time.Duration, budget int64, pick keyPicker, size int) getWindow {
	seed := uint64(time.Now().UnixNano())
	ex, elapsed := runLoops(ctx, clients, d, budget, func(i int) func(context.Context) error {
		c := s.client(i)
		r := rand.New(rand.NewPCG(uint64(i), seed))
		return func(ctx context.Context) error {
			g := pick(r)
			rep, err := exchange(ctx, c, g.req)
			if err == nil {
				err = checkValue(rep, g.key, size)
			}
			return err
		}
	})
	return getWindow{exchanges: ex, elapsed: elapsed}
}

func (w *getWindow) add(o *getWindow) {
	w.merge(&o.exchanges)
	w.elapsed += o.elapsed
}

// getRate is the figures of keyed GETs of one view over its windows.
type getRate struct {
	Requests       int64     `json:"requests"`
	Seconds        float64   `json:"seconds"`
	PerSecond      float64   `json:"req_per_s"`
	Latency        latency   `json:"latency"`
	RoundPerSecond []float64 `json:"round_req_per_s,omitempty"`
}

func getRateOf(w *getWindow, rounds []float64) getRate {
	r := getRate{Requests: w.requests, Seconds: w.elapsed.Seconds(), Latency: w.lat.summary(), RoundPerSecond: rounds}
	if w.elapsed > 0 {
		r.PerSecond = float64(w.requests) / w.elapsed.Seconds()
	}
	return r
}

// keyedSide is a view to GET: its name in errors and its connections.
type keyedSide struct {
	name string
	s    *side
}

// keyedRounds measures keyed GETs of each side: -warmup unmeasured first,
// then -rounds rounds of -duration each, alternating which side goes
// first, so a neighbour's burst on a shared machine lands on both alike.
func keyedRounds(ctx context.Context, o *options, sides []keyedSide, pick keyPicker) ([]getRate, error) {
	if o.warmup > 0 {
		for _, sd := range sides {
			if w := keyedLoad(ctx, sd.s, o.clients, o.warmup, o.maxReqs, pick, o.valueSize); w.errors > 0 {
				return nil, fmt.Errorf("warming up the GETs of %s: %d failed; first failure: %v", sd.name, w.errors, w.firstErr)
			}
		}
	}
	ws := make([]getWindow, len(sides))
	rounds := make([][]float64, len(sides))
	for r := range o.rounds {
		for k := range sides {
			i := (r + k) % len(sides)
			w, err := measuredWindow(ctx, o, sides[i], pick)
			if err != nil {
				return nil, err
			}
			ws[i].add(&w)
			rounds[i] = append(rounds[i], float64(w.requests)/w.elapsed.Seconds())
		}
	}
	out := make([]getRate, len(sides))
	for i := range sides {
		out[i] = getRateOf(&ws[i], rounds[i])
	}
	return out, nil
}

// measuredWindow is one window of keyed GETs of a side, every one of
// which must be answered with its key's value.
func measuredWindow(ctx context.Context, o *options, sd keyedSide, pick keyPicker) (getWindow, error) {
	w := keyedLoad(ctx, sd.s, o.clients, o.duration, o.maxReqs, pick, o.valueSize)
	if ctx.Err() != nil {
		return w, ctx.Err()
	}
	if w.errors > 0 || w.requests == 0 {
		return w, fmt.Errorf("GETs of %s: %d answered, %d failed; first failure: %v", sd.name, w.requests, w.errors, w.firstErr)
	}
	return w, nil
}

// sidesOf is the views to GET: in memory (when they run) and on disk;
// the disk's is last.
func sidesOf(mem, disk *side) []keyedSide {
	var out []keyedSide
	if mem != nil {
		out = append(out, keyedSide{"the big view in memory", mem})
	}
	return append(out, keyedSide{"the big view on disk", disk})
}

// versusMemory is how a GET ratio of the big view on disk against the
// view in memory is described and its target ("" for none). With -split
// the processor with its views on disk runs in a child process and the one
// in memory in this process, beside the clients: every GET to the child
// crosses from one Go runtime to another, and cost the machine about a
// fifth more per GET (in two pairs alternated at 200,000 keys, the hot set
// 0.76 and 0.79 × with -split against 0.98 and 1.03 × without). That
// ratio is not the stores', so it carries no target.
func versusMemory(o *options, of, target string) (string, string) {
	if !o.split {
		return of, target
	}
	return of + "; the view on disk in a child process, the one in memory in this one: not like for like", ""
}

// hotGets measures GETs of keys drawn per request from a hot set of
// hotKeys keys of the big view, on disk and in memory, in the same rounds.
func hotGets(ctx context.Context, o *options, mem, disk *side, res *Result) error {
	n := min(hotKeys, o.viewKeys)
	res.param("hot_keys", n)
	rates, err := keyedRounds(ctx, o, sidesOf(mem, disk), hotPicker(disk.client(0), n, o.viewKeys))
	if err != nil {
		return fmt.Errorf("the hot set: %w", err)
	}
	d := rates[len(rates)-1]
	if mem != nil {
		res.figures("mem_hot_get", rates[0])
	}
	res.figures("disk_hot_get", d)
	if mem != nil {
		of, target := versusMemory(o, "GETs per second of keys drawn from a hot set (hot_keys), big view on disk ÷ in memory, in the same rounds", "≥ 0.8")
		res.ratio("disk_hot_get_ratio", ratio(d.PerSecond, rates[0].PerSecond), of, target)
	}
	return nil
}

// uniformGets measures GETs of keys drawn uniformly over the whole big
// view: on disk first with the store's files out of the kernel's page cache
// (one window; the store's own block cache in the processor is not
// emptied), then, with every file read once, warm in rounds beside the view
// in memory when it runs.
func uniformGets(ctx context.Context, o *options, mem, disk *side, dir string, res *Result) error {
	pick := uniformPicker(disk.client(0), o.viewKeys)
	how, err := dropPageCache(dir, o.dropAllCaches)
	if err != nil {
		return err
	}
	res.param("page_cache_drop", how)
	cold, err := measuredWindow(ctx, o, keyedSide{"the big view on disk, page cache dropped", disk}, pick)
	if err != nil {
		return err
	}
	res.figures("disk_uniform_cold_get", getRateOf(&cold, nil))
	if err := readFiles(dir); err != nil {
		return err
	}
	rates, err := keyedRounds(ctx, o, sidesOf(mem, disk), pick)
	if err != nil {
		return fmt.Errorf("uniform keys: %w", err)
	}
	d := rates[len(rates)-1]
	if mem != nil {
		res.figures("mem_uniform_get", rates[0])
	}
	res.figures("disk_uniform_get", d)
	res.ratio("disk_uniform_cold_p99_ratio", ratio(cold.lat.quantileMs(99), d.Latency.P99Ms),
		"p99 of GETs of uniform keys on disk, page cache dropped ÷ warm", "")
	if mem != nil {
		of, target := versusMemory(o, "GETs per second of uniform keys over the whole big view, on disk (warm) ÷ in memory, in the same rounds", "")
		res.ratio("disk_uniform_get_ratio", ratio(d.PerSecond, rates[0].PerSecond), of, target)
	}
	return nil
}

// readFiles reads every file under dir once, so the kernel's page cache
// holds the store (as far as memory allows): the warm leg's premise.
func readFiles(dir string) error {
	return eachFile(dir, func(f *os.File) error {
		if _, err := io.Copy(io.Discard, f); err != nil {
			return fmt.Errorf("warming the page cache with %s: %w", f.Name(), err)
		}
		return nil
	})
}

// eachFile calls fn with every regular file under dir, open; a file
// removed meanwhile (a compaction's input) is skipped.
func eachFile(dir string, fn func(*os.File) error) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // compacted away meanwhile
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("opening %s: %w", path, err)
		}
		defer f.Close()
		return fn(f)
	})
}
