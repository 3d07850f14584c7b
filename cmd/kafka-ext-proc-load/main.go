// Command kafka-ext-proc-load is the processor's load generator. It speaks
// ext_proc to the processor as Envoy does, through the Envoy emulator's
// client side (emulator.Client: no HTTP in the loop), and compares it in the
// same run, on the same machine, with a no-op ext_proc server that answers
// the same bytes. Ratios taken in one run are what it reports: absolute
// figures on a shared machine are noise.
//
// Everything runs on loopback and needs no setup: the embedded broker, the
// processor (stack.StartProcessor), the no-op server and the clients, all
// in this process by default, so every figure includes the client side's
// share of the CPU, allocations and memory. With -split the server side
// runs in a child process (this binary again) and is also measured alone;
// both processes still share the machine's cores (see BENCHMARKS.md).
//
//	kafka-ext-proc-load -scenario fetch-single|fetch-merged|longpoll|request-reply|produce-oneway|grpc-fanout|sse-fanout|view-scale|idle-routes|models|reply-soak|kafka-grpc|all [-split] [flags]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if level, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childMain(ctx, level, os.Stdin, os.NewFile(3, "answers"), os.Stderr))
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Scenario names (flag -scenario).
const (
	scenarioSingle       = "fetch-single"
	scenarioMerged       = "fetch-merged"
	scenarioLongPoll     = "longpoll"
	scenarioRequestReply = "request-reply"
	scenarioOneway       = "produce-oneway"
	scenarioFanout       = "grpc-fanout"
	scenarioSSEFanout    = "sse-fanout"
	scenarioViewScale    = "view-scale"
	scenarioIdleRoutes   = "idle-routes"
	scenarioModels       = "models"
	scenarioReplySoak    = "reply-soak"
	scenarioKafkaGRPC    = "kafka-grpc"
	scenarioAll          = "all"
)

// A scenario measures one thing against its baseline in one run and says
// so in a Result.
type scenario struct {
	name string
	// inAll: run by -scenario all. The others write a million records,
	// idle for long, or start servers of their own.
	inAll bool
	run   func(ctx context.Context, e *env, o *options) (*Result, error)
}

// scenarios lists every scenario, in the order -scenario all runs them.
func scenarios() []scenario {
	fetch := func(name string) func(context.Context, *env, *options) (*Result, error) {
		return func(ctx context.Context, e *env, o *options) (*Result, error) { return runFetch(ctx, e, o, name) }
	}
	return []scenario{
		{scenarioSingle, true, fetch(scenarioSingle)},
		{scenarioMerged, true, fetch(scenarioMerged)},
		{scenarioLongPoll, true, runLongPoll},
		{scenarioRequestReply, true, runRequestReply},
		{scenarioOneway, true, runProduceOneway},
		{scenarioFanout, true, runFanout},
		{scenarioSSEFanout, false, runSSEFanout},
		{scenarioViewScale, false, runViewScale},
		{scenarioIdleRoutes, false, runIdleRoutes},
		{scenarioModels, false, runModels},
		{scenarioReplySoak, false, runReplySoak},
		{scenarioKafkaGRPC, false, runKafkaGRPC},
	}
}

// Bounds on the flags, so a typo cannot start a run that never ends or
// exhausts the machine.
const (
	maxClients  = 4096
	maxConns    = 64
	maxWaiters  = 100000 // BENCHMARKS.md measures the long poll at up to 100,000
	maxKeys     = 100000
	maxViewKeys = 4_000_000
	maxRoutes   = 10000
	maxDuration = 10 * time.Minute
	minValue    = 48 // room for the JSON envelope of a value
	maxValue    = 64 << 10
	maxStreams  = 20000
	maxRate     = 100000
)

// options are the parsed flags.
type options struct {
	scenarios []scenario
	clients   int           // concurrent clients of the fetch scenarios
	conns     int           // ext_proc connections (Envoy opens one per worker thread)
	duration  time.Duration // measured time per target and round
	warmup    time.Duration // unmeasured load per target before the rounds
	rounds    int           // rounds; each measures both targets, alternating which goes first
	maxReqs   int64         // request budget per target and round
	keys      int           // keys of the merged route (and of view-scale's small view)
	viewKeys  int           // keys of view-scale's big view
	routes    int           // idle-routes' routes
	idle      time.Duration // idle-routes' measured idle time, before and with the processor
	fetchWait time.Duration // idle-routes' fetch.wait.max.ms for both consumers; 0 = the processor's default
	valueSize int           // bytes per record value
	// valueRandom: view-scale's values do not compress (randomValue).
	valueRandom bool
	waiters     int           // long-poll waiters
	register    time.Duration // bound on registering the waiters (and the fan-out's streams)
	// The grpc-fanout scenario: streams subscribers, fanRate records/s
	// for fanDuration, recordSize bytes each.
	streams     int
	fanRate     int
	fanDuration time.Duration
	recordSize  int
	// The sse-fanout scenario: sseClients SSE clients and as many gRPC
	// streams, and resumes resumes of one more client of each.
	sseClients  int
	resumes     int
	sseFirst    bool          // run the SSE leg before the gRPC one
	timeout     time.Duration // bound on the whole run
	json        bool
	split       bool // servers in a child process
	profiles    profiles
	idleProfile string // CPU profile of idle-routes' idle window with the processor
	routeRounds int    // idle-routes' passes of one route and of each route again
	routeProf   string // idle-routes: CPU profiles of those passes, PREFIX-{one,each}.pprof
	logLevel    slog.Level
	limits      string // more fields of the processor's limits, YAML flow form
	rawHeaders  string // rawHeadersOwn or rawHeadersGateway
	// The reply-soak scenario: soakClients clients for soakDuration (the
	// -clients and -duration flags when given, else its own defaults),
	// soakBody bytes per order, a replay every replayEvery requests, the
	// server side sampled every sampleEvery.
	soakClients  int
	soakDuration time.Duration
	soakBody     int
	replayEvery  int
	replayWindow time.Duration
	sampleEvery  time.Duration
	// viewDiskOnly: view-scale measures the raw read and the views on
	// disk alone (a view of 4 GiB is refused in memory).
	viewDiskOnly bool
	// dropAllCaches: view-scale's cold leg drops the whole machine's page
	// cache (root), not only the store's files'.
	dropAllCaches bool
	// brokerApart runs the embedded broker in this process rather than in
	// the child (-split): set for the soak alone, whose server memory is
	// the question and would otherwise hold every record of the run.
	brokerApart bool
	// profileDisk gives the profiles of a -split view-scale run to its
	// processor with the views on disk (a child of its own, profiled
	// from its start through its first load and GETs): the env's child
	// serves nothing there.
	profileDisk bool
}

// Values of -raw-headers: which headers the raw loops' records carry.
const (
	rawHeadersOwn     = "own"
	rawHeadersGateway = "gateway"
)

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("kafka-ext-proc-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	var names, notInAll []string
	for _, sc := range scenarios() {
		names = append(names, sc.name)
		if !sc.inAll {
			notInAll = append(notInAll, sc.name)
		}
	}
	scenario := fs.String("scenario", scenarioAll, fmt.Sprintf("%s, or all (every one but %s)", strings.Join(names, ", "), strings.Join(notInAll, ", ")))
	fs.IntVar(&o.clients, "clients", 32, "concurrent clients of the fetch scenarios")
	fs.IntVar(&o.conns, "conns", 2, "ext_proc gRPC connections per target (Envoy opens one per worker thread; its default is one worker per core)")
	// Many short rounds rather than two long ones: on a shared machine a
	// neighbour's burst then lands on both targets alike.
	fs.DurationVar(&o.duration, "duration", 2*time.Second, "measured time per target and round")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load per target before the rounds")
	fs.IntVar(&o.rounds, "rounds", 6, "rounds of the fetch scenarios; each measures both targets, alternating which goes first")
	fs.Int64Var(&o.maxReqs, "max-requests", 5_000_000, "request budget per target and round")
	fs.IntVar(&o.keys, "keys", 1000, "keys of the merged route, and of the small view of view-scale")
	fs.IntVar(&o.viewKeys, "view-keys", 1_000_000, "keys of the big view of view-scale")
	fs.BoolVar(&o.dropAllCaches, "drop-all-caches", false, "view-scale: before the uniform GETs on disk, drop the whole machine's page cache (as root, /proc/sys/vm/drop_caches: certain, and every other program's files go cold too) rather than the store's files' pages alone (POSIX_FADV_DONTNEED, which the kernel may decline for pages in use)")
	fs.BoolVar(&o.viewDiskOnly, "view-disk-only", false, "view-scale: skip the views in memory (a view over limits.max-view-bytes is refused) and measure the raw read and the views on disk alone")
	fs.IntVar(&o.routes, "routes", 1000, "fetch routes (one topic each) of idle-routes")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "how long idle-routes measures the idle process, before and with the processor")
	fs.DurationVar(&o.fetchWait, "fetch-wait", 0, "idle-routes: the binding's fetch.wait.max.ms, for the processor and the raw consumer alike (0: the live consumer's default)")
	fs.IntVar(&o.valueSize, "value-size", 200, "bytes per record value")
	fs.BoolVar(&o.valueRandom, "value-random", false, "view-scale: values padded with random characters, which do not compress (by default the pad is one repeated byte, which the store on disk compresses to almost nothing)")
	fs.IntVar(&o.waiters, "waiters", 1000, "long-poll waiters (at most 100000)")
	fs.DurationVar(&o.register, "register-timeout", 60*time.Second, "bound on registering the long-poll waiters and opening the fan-out's streams")
	fs.IntVar(&o.streams, "streams", 1000, "gRPC fan-out streams (at most 20000)")
	fs.IntVar(&o.fanRate, "rate", 1000, "records/s written to the fan-out topic")
	fs.DurationVar(&o.fanDuration, "fanout-duration", 10*time.Second, "how long the fan-out writes")
	fs.IntVar(&o.recordSize, "record-size", 100, "bytes per fan-out record value")
	fs.IntVar(&o.sseClients, "sse-clients", 10000, "sse-fanout: SSE clients, and gRPC fan-out streams beside them (at most 20000)")
	fs.IntVar(&o.resumes, "resumes", 20, "sse-fanout: resumes of one more client of each kind, with the others open")
	fs.BoolVar(&o.sseFirst, "sse-first", false, "sse-fanout: run the SSE leg first (the first leg's resident-set figure is the one not lowered by pages the other left)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per scenario instead of text")
	fs.BoolVar(&o.split, "split", false, "run the broker, the processor and the no-op server in a child process, so the server side's allocations, CPU and memory are measured apart from the clients'")
	fs.StringVar(&o.profiles.CPU, "cpuprofile", "", "write a CPU profile of the whole run to this file (with -split: of the server process; for view-scale, of the processor with its views on disk until its first stop)")
	fs.StringVar(&o.profiles.Mutex, "mutexprofile", "", "write a mutex contention profile of the whole run to this file (with -split: of the server process; for view-scale, of the processor with its views on disk until its first stop)")
	fs.StringVar(&o.profiles.Trace, "trace", "", "write an execution trace of the whole run to this file (with -split: of the server process; for view-scale, of the processor with its views on disk until its first stop, and its big view's catch-up is read back from it into the disk_trace_* figures)")
	fs.StringVar(&o.profiles.Allocs, "allocprofile", "", "write an allocation profile of the whole run to this file (with -split: of the server process; for view-scale, of the processor with its views on disk until its first stop)")
	fs.StringVar(&o.profiles.Wake, "wakeprofile", "", "longpoll: write CPU profiles of the wake-up alone, from the release until every waiter was answered, to PREFIX-{noop,processor}-wake.pprof (with -split: of the server process); not with -cpuprofile")
	fs.StringVar(&o.profiles.Heap, "heapprofile", "", "longpoll: write heap profiles to PREFIX-{noop,processor}-{before,held,woken}.pprof, before the waiters, with them held and once all were answered (with -split: of the server process); samples every 4 KiB, so the run's times are not figures")
	fs.IntVar(&o.routeRounds, "route-rounds", 5, "idle-routes: passes of one route, and of each route again, after the first pass to each route")
	fs.StringVar(&o.routeProf, "routeprofile", "", "idle-routes: after the measured passes, write CPU profiles of -route-rounds more passes of one route and of each route to PREFIX-one.pprof and PREFIX-each.pprof, and of the no-op server's to PREFIX-noop-one.pprof and PREFIX-noop-each.pprof; not with -cpuprofile")
	fs.StringVar(&o.idleProfile, "idleprofile", "", "write a CPU profile of idle-routes' idle window with the processor (its views ready, no traffic) to this file; not with -cpuprofile")
	fs.StringVar(&o.limits, "limits", "", "more fields of the processor's limits, in YAML flow form, e.g. 'stream-send-rate: 10000, stream-send-interval: 100ms' (default: the processor's defaults, and max-wait 60s)")
	fs.StringVar(&o.rawHeaders, "raw-headers", rawHeadersOwn, "headers of the raw loops' records (request-reply, produce-oneway): own (the few a service would write) or gateway (those of the processor's record for the same request, read back from Kafka)")
	fs.IntVar(&o.soakBody, "soak-body", 1024, "reply-soak: bytes per order's body (its reply echoes it), so the reply index's bound fills in minutes")
	fs.IntVar(&o.replayEvery, "replay-every", 10, "reply-soak: each client replays an earlier order every this many requests")
	fs.DurationVar(&o.replayWindow, "replay-window", 0, "reply-soak: the processor's reply-retention and idempotency-window (added to -limits), replays chosen among the orders answered within nine tenths of it (0: the processor's defaults, replays across the whole history); memory is then also reported from twice the window on, when what the windows keep has turned over")
	fs.DurationVar(&o.sampleEvery, "sample-every", 10*time.Second, "reply-soak: how often the server side's memory and reply index are sampled")
	level := fs.String("log-level", "warn", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// The soak's clients and duration are the shared flags when given;
	// their defaults are for the short windows of the other scenarios.
	o.soakClients, o.soakDuration = soakClients, soakDuration
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "clients":
			o.soakClients = o.clients
		case "duration":
			o.soakDuration = o.duration
		}
	})
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.replayWindow > 0 {
		w := fmt.Sprintf("reply-retention: %s, idempotency-window: %s", o.replayWindow, o.replayWindow)
		o.limits = strings.TrimPrefix(o.limits+", "+w, ", ")
	}
	for _, sc := range scenarios() {
		if *scenario == sc.name || *scenario == scenarioAll && sc.inAll {
			o.scenarios = append(o.scenarios, sc)
		}
	}
	if len(o.scenarios) == 0 {
		return nil, fmt.Errorf("-scenario %q: want %s or all", *scenario, strings.Join(names, ", "))
	}
	o.brokerApart = o.split && len(o.scenarios) == 1 && o.scenarios[0].name == scenarioReplySoak
	o.profileDisk = o.split && len(o.scenarios) == 1 && o.scenarios[0].name == scenarioViewScale
	if o.idleProfile != "" && o.profiles.CPU != "" {
		return nil, errors.New("-idleprofile and -cpuprofile: the Go runtime takes one CPU profile at a time; give one")
	}
	if o.routeProf != "" && o.profiles.CPU != "" {
		return nil, errors.New("-routeprofile and -cpuprofile: the Go runtime takes one CPU profile at a time; give one")
	}
	if o.profiles.Wake != "" && o.profiles.CPU != "" {
		return nil, errors.New("-wakeprofile and -cpuprofile: the Go runtime takes one CPU profile at a time; give one")
	}
	if o.rawHeaders != rawHeadersOwn && o.rawHeaders != rawHeadersGateway {
		return nil, fmt.Errorf("-raw-headers %q: want own or gateway", o.rawHeaders)
	}
	if err := o.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	for _, c := range []struct {
		name      string
		v, lo, hi int64
	}{
		{"clients", int64(o.clients), 1, maxClients},
		{"conns", int64(o.conns), 1, maxConns},
		{"rounds", int64(o.rounds), 1, 100},
		{"max-requests", o.maxReqs, 1, 1 << 40},
		{"keys", int64(o.keys), 1, maxKeys},
		{"view-keys", int64(o.viewKeys), 1, maxViewKeys},
		{"routes", int64(o.routes), 1, maxRoutes},
		{"route-rounds", int64(o.routeRounds), 1, 1000},
		{"value-size", int64(o.valueSize), minValue, maxValue},
		{"waiters", int64(o.waiters), 1, maxWaiters},
		{"streams", int64(o.streams), 1, maxStreams},
		{"sse-clients", int64(o.sseClients), 1, maxStreams},
		{"resumes", int64(o.resumes), 1, 1000},
		{"rate", int64(o.fanRate), 1, maxRate},
		{"record-size", int64(o.recordSize), minRecord, maxValue},
		{"soak-body", int64(o.soakBody), minValue, maxValue},
		{"replay-every", int64(o.replayEvery), 2, 1000},
	} {
		if c.v < c.lo || c.v > c.hi {
			return nil, fmt.Errorf("-%s %d: want %d..%d", c.name, c.v, c.lo, c.hi)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		lo   time.Duration
	}{
		{"duration", o.duration, time.Millisecond},
		{"warmup", o.warmup, 0},
		{"register-timeout", o.register, time.Second},
		{"fanout-duration", o.fanDuration, time.Millisecond},
		{"timeout", o.timeout, time.Second},
		{"idle", o.idle, 10 * time.Millisecond},
		{"fetch-wait", o.fetchWait, 0},
		{"sample-every", o.sampleEvery, 10 * time.Millisecond},
	} {
		if d.v < d.lo || d.v > maxDuration {
			return nil, fmt.Errorf("-%s %v: want %v..%v", d.name, d.v, d.lo, maxDuration)
		}
	}
	return o, nil
}

// run executes the scenarios and returns the exit code: 0 success, 1
// failure, 2 usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "kafka-ext-proc-load:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	if err := runScenarios(ctx, o, stdout, logger); err != nil {
		fmt.Fprintln(stderr, "kafka-ext-proc-load:", err)
		return 1
	}
	return 0
}

func runScenarios(ctx context.Context, o *options, stdout io.Writer, logger *slog.Logger) (err error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	// With -split the profiles are of the server process (the processor
	// is what they are for); the child writes them.
	prof := o.profiles
	if o.split {
		prof = profiles{}
	}
	stopProfiles, err := startProfiles(prof)
	if err != nil {
		return err
	}
	defer func() {
		if perr := stopProfiles(); err == nil {
			err = perr
		}
	}()

	e, err := startEnv(ctx, o, logger)
	if err != nil {
		return err
	}
	defer e.close()
	if !o.json {
		where := "servers and clients in one process"
		if o.split {
			where = "servers in a child process"
		}
		fmt.Fprintf(stdout, "kafka-ext-proc-load: %s/%s, %d CPUs, GOMAXPROCS %d, %s; %s\n",
			runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), where)
		if o.limits != "" {
			fmt.Fprintf(stdout, "processor limits: %s\n", o.limits)
		}
	}
	for _, sc := range o.scenarios {
		res, err := sc.run(ctx, e, o)
		// A scenario that measured before it failed (the soak's failed
		// answers) reports what it measured, then fails.
		if res != nil {
			if rerr := report(stdout, o.json, res); rerr != nil {
				return errors.Join(err, rerr)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
	}
	return nil
}

// profiles names the files to write profiles to ("" for none).
type profiles struct {
	CPU    string `json:"cpu,omitempty"`
	Mutex  string `json:"mutex,omitempty"`
	Allocs string `json:"allocs,omitempty"`
	Trace  string `json:"trace,omitempty"`
	// Heap prefixes the long poll's heap profiles: before the waiters and
	// with them held, of each server (see holdWaiters).
	Heap string `json:"heap,omitempty"`
	// Wake prefixes the long poll's CPU profiles of the wake-up alone.
	Wake string `json:"wake,omitempty"`
}

// startProfiles starts the profiles asked for; the returned function
// writes them.
func startProfiles(p profiles) (func() error, error) {
	var stops []func() error
	stopAll := func() error {
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}
	if p.CPU != "" {
		f, err := os.Create(p.CPU)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stops = append(stops, func() error {
			pprof.StopCPUProfile()
			return f.Close()
		})
	}
	if p.Trace != "" {
		f, err := os.Create(p.Trace)
		if err != nil {
			return nil, errors.Join(err, stopAll())
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return nil, errors.Join(err, stopAll())
		}
		stops = append(stops, func() error {
			trace.Stop()
			return f.Close()
		})
	}
	if p.Mutex != "" {
		// Sample every contention event: the question is which mutexes
		// show up at all (the contention target BENCHMARKS.md states), not
		// their exact share.
		prev := runtime.SetMutexProfileFraction(1)
		stops = append(stops, func() error {
			defer runtime.SetMutexProfileFraction(prev)
			return writeProfile("mutex", p.Mutex)
		})
	}
	if p.Heap != "" {
		// Fine enough to tell apart what a few hundred bytes per waiter
		// are; the default (512 KiB) hides them.
		runtime.MemProfileRate = 4 << 10
	}
	if p.Allocs != "" {
		// The default sampling (one per 512 KiB allocated) is enough to
		// rank allocation sites.
		stops = append(stops, func() error { return writeProfile("allocs", p.Allocs) })
	}
	return stopAll, nil
}

func writeProfile(name, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
