// Package stack wires the running parts together: the processor's gRPC
// server with health and the admin endpoints (for `serve`), and the whole
// development stack of embedded broker, processor and Envoy emulator (for
// `dev` and the end-to-end tests). It holds wiring only; behaviour lives in
// the packages it wires.
package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/kafka-ext-proc/kafka-ext-proc/admin"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkagrpc"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/guard"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/ssekafka"
)

// ProcessorOptions configure StartProcessor.
type ProcessorOptions struct {
	Config *config.Config
	Listen string // ext_proc gRPC address
	Admin  string // admin HTTP address; "" = no admin server
	Logger *slog.Logger
	// DrainDelay is how long Shutdown keeps serving after turning health
	// NOT_SERVING, so Envoy's health checks see it before anything is cut
	// short (one health-check interval; 0 in tests).
	DrainDelay time.Duration
	// Guards checks guarded routes (nil: a guard.Checker for Config's
	// guards, reloaded with the configuration).
	Guards processor.GuardChecker
	// TLS, when set, serves the ext_proc port over TLS (mTLS with client CAs).
	TLS *tls.Config
	// TracerProvider makes a span per exchange (nil: no tracing).
	TracerProvider trace.TracerProvider
	// WrapHTTP and WrapGRPC, when set, wrap the capability handlers (tests
	// observe what reaches them).
	WrapHTTP func(handler.HTTPHandler) handler.HTTPHandler
	WrapGRPC func(handler.GRPCHandler) handler.GRPCHandler
	// PartitionCheck is how often the Kafka readers look for partitions
	// added to their topics (0: every 30s; tests shorten it).
	PartitionCheck time.Duration
	// KeysClock is the key index's clock (nil: time.Now): a test runs a
	// replica ahead in time to see keys expire without waiting for them.
	KeysClock func() time.Time
}

// Processor is a running ext_proc server with its health and admin endpoints.
type Processor struct {
	Server    *processor.Server
	Readiness *admin.Readiness
	Registry  *prometheus.Registry
	// SSE is the sse-kafka handler, whose counters tests read.
	SSE *ssekafka.Handler

	grpc      *grpc.Server
	health    *health.Server
	admin     *http.Server
	lis       net.Listener
	adminLis  net.Listener
	kafka     map[string]*kafkaio.Cluster
	routes    *kafkaroute.Kafka // the Kafka side of the routes, prepared on start and reload
	collector *kafkaCollector
	models    *modelMetrics
	reloads   *reloadMetrics
	httpk     *httpkafka.Handler
	kgrpc     []*kafkagrpc.Worker // the kafka-grpc bindings' workers
	drain     context.CancelFunc
	delay     time.Duration
	mu        sync.Mutex // serialises reloads
	cfg       *config.Config
	guards    *guard.Checker // nil when the guards were given
	logger    *slog.Logger
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// StartProcessor listens on opts.Listen (and opts.Admin) and serves.
func StartProcessor(opts ProcessorOptions) (*Processor, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	readiness := admin.NewReadiness()
	guards, checker, err := guardsOf(opts)
	if err != nil {
		return nil, err
	}
	drainCtx, drain := context.WithCancel(context.Background())

	mm := newModelMetrics(reg, opts.Config)
	readiness.SetNotes(mm.registries.notes)
	clients, routes, err := startKafka(opts.Config, readiness, logger, opts.PartitionCheck, opts.KeysClock, mm)
	if err != nil {
		drain()
		return nil, err
	}
	fail := func(err error) (*Processor, error) {
		closeKafka(clients)
		drain()
		return nil, err
	}
	kc := newKafkaCollector(clients, opts.Config)
	reg.MustRegister(kc)
	httpk := httpkafka.New(logger, routes)
	httpH, grpcH := bindingHandlers(opts, reg, logger, httpk, routes)
	ssek := ssekafka.New(logger, routes)
	registerSSEMetrics(reg, ssek)
	srv, err := processor.New(processor.Options{Config: opts.Config, Logger: logger, Registerer: reg, Drain: drainCtx,
		Guards: guards, TracerProvider: opts.TracerProvider, HTTP: httpH, GRPC: grpcH, SSE: ssek})
	if err != nil {
		return fail(fmt.Errorf("creating the processor: %w", err))
	}

	lis, workers, err := listenAndStartWorkers(opts, logger, reg, clients)
	if err != nil {
		return fail(err)
	}
	p := &Processor{
		kgrpc:     workers,
		Server:    srv,
		SSE:       ssek,
		Readiness: readiness,
		Registry:  reg,
		grpc:      grpc.NewServer(GRPCServerOptions(opts.TLS)...),
		guards:    checker,
		health:    health.NewServer(),
		lis:       lis,
		kafka:     clients,
		routes:    routes,
		collector: kc,
		models:    mm,
		reloads:   newReloadMetrics(reg),
		httpk:     httpk,
		drain:     drain,
		delay:     opts.DrainDelay,
		cfg:       opts.Config,
		logger:    logger,
	}
	checkKafka(drainCtx, opts.Config, readiness, logger, &p.wg)
	warmModels(drainCtx, opts.Config, logger, &p.wg)
	srv.Register(p.grpc)
	healthpb.RegisterHealthServer(p.grpc, p.health)
	readiness.Watch(p.setServing)

	if err := p.serve(lis, opts.Admin); err != nil {
		return fail(err)
	}
	return p, nil
}

// serve serves ext_proc on lis, and the admin endpoints on adminAddr when
// one is given.
func (p *Processor) serve(lis net.Listener, adminAddr string) error {
	if adminAddr != "" {
		if err := p.serveAdmin(adminAddr); err != nil {
			lis.Close()
			return err
		}
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.grpc.Serve(lis); err != nil {
			p.logger.Error("ext_proc server stopped", "err", err)
		}
	}()
	return nil
}

// guardsOf is the options' guard checker, or one built from the
// configuration (then also returned as checker, which reloads with it).
func guardsOf(opts ProcessorOptions) (guards processor.GuardChecker, checker *guard.Checker, err error) {
	if opts.Guards != nil {
		return opts.Guards, nil, nil
	}
	c, err := guard.New(opts.Config)
	if err != nil {
		return nil, nil, err
	}
	return c, c, nil
}

// bindingHandlers builds the binding handlers over the routes' Kafka side,
// registers their metrics, and applies the options' wrappers.
func bindingHandlers(opts ProcessorOptions, reg prometheus.Registerer, logger *slog.Logger, httpk *httpkafka.Handler,
	routes *kafkaroute.Kafka) (handler.HTTPHandler, handler.GRPCHandler) {
	grpck := grpckafka.New(logger, routes)
	registerCapabilityMetrics(reg, httpk, grpck)
	var httpH handler.HTTPHandler = httpk
	var grpcH handler.GRPCHandler = grpck
	if opts.WrapHTTP != nil {
		httpH = opts.WrapHTTP(httpH)
	}
	if opts.WrapGRPC != nil {
		grpcH = opts.WrapGRPC(grpcH)
	}
	return httpH, grpcH
}

// setServing reports the readiness through gRPC health.
func (p *Processor) setServing(ready bool) {
	status := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		status = healthpb.HealthCheckResponse_SERVING
	}
	p.health.SetServingStatus("", status)
	p.health.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", status)
}

// serveAdmin listens on addr and serves the admin endpoints.
func (p *Processor) serveAdmin(addr string) error {
	alis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for admin on %s: %w", addr, err)
	}
	p.adminLis = alis
	p.admin = &http.Server{Handler: admin.Handler(p.Registry, p.Readiness), ReadHeaderTimeout: 10 * time.Second}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.admin.Serve(alis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.logger.Error("admin server stopped", "err", err)
		}
	}()
	return nil
}

// KeepaliveMinTime is the shortest gap between HTTP/2 PINGs the processor's
// gRPC server permits (grpc-go's default is 5 minutes); closer ones end the
// connection with a too_many_pings GOAWAY. envoy/envoy.yaml's processor
// cluster pings every 10s, and `validate --envoy` checks a config against it.
const KeepaliveMinTime = 5 * time.Second

// streamWorkers is how many goroutines serve ext_proc streams and are kept
// between them: about the exchanges in flight at a time under load.
const streamWorkers = 128

// GRPCServerOptions are the options of the processor's gRPC server (TLS
// when tlsCfg is set). The load generator's no-op ext_proc server uses them
// too, so its baseline has the same plumbing.
func GRPCServerOptions(tlsCfg *tls.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newSendCodec()),
		// Envoy pings on idle connections too (no ext_proc stream open).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		// Streams run on reused goroutines whose stacks have already grown:
		// a fresh goroutine per stream grew and copied its stack on every
		// exchange (runtime.newstack, 5 % of the CPU of a validated produce
		// run; BENCHMARKS.md). A stream that finds every worker busy gets a
		// goroutine of its own, as without the option. grpc-go marks the
		// option experimental; its version is pinned in go.mod.
		grpc.NumStreamWorkers(streamWorkers),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	return opts
}

// Addr is the ext_proc listen address.
func (p *Processor) Addr() string { return p.lis.Addr().String() }

// AdminAddr is the admin listen address ("" without one).
func (p *Processor) AdminAddr() string {
	if p.adminLis == nil {
		return ""
	}
	return p.adminLis.Addr().String()
}

// Reload swaps in a new configuration; on error the old one keeps serving.
// Routes, guards and bindings may change; kafka bindings and limits need a
// restart. Views, reply indexes and open exchanges carry over. The result
// is counted in the reload metrics.
func (p *Processor) Reload(cfg *config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.reload(cfg)
	p.reloads.record(err)
	return err
}

func (p *Processor) reload(cfg *config.Config) error {
	if err := sameKafka(p.cfg, cfg); err != nil {
		return fmt.Errorf("reloading the configuration: %w", err)
	}
	if err := sameKafkaGRPC(p.cfg, cfg); err != nil {
		return fmt.Errorf("reloading the configuration: %w", err)
	}
	if err := p.routes.Prepare(cfg); err != nil {
		return fmt.Errorf("reloading the configuration: %w", err)
	}
	// Guards first: in the moment between the two swaps a request can only
	// be refused, never let through.
	if p.guards != nil {
		if err := p.guards.Reload(cfg); err != nil {
			return fmt.Errorf("reloading the configuration: %w", err)
		}
	}
	if err := p.Server.Swap(cfg); err != nil {
		return fmt.Errorf("reloading the configuration: %w", err)
	}
	p.cfg = cfg
	p.collector.setConfig(cfg)
	p.models.registries.cfg.Store(cfg)
	// The new configuration's registry catalogs start with empty caches.
	warmModels(context.Background(), cfg, p.logger, &p.wg)
	p.httpk.Retain(cfg)
	return nil
}

// Shutdown drains (docs/design.md#drain): health turns NOT_SERVING and the
// process keeps serving for the drain delay, so Envoy moves traffic away first;
// then long waits are told to finish (long polls answer with their current
// state, pending async produces with 202, fetch streams end UNAVAILABLE), open
// exchanges get until ctx ends, and producers flush what they hold.
func (p *Processor) Shutdown(ctx context.Context) {
	p.closeOnce.Do(func() {
		p.Readiness.Set("drain", false, "draining")
		p.health.Shutdown()
		if p.delay > 0 {
			t := time.NewTimer(p.delay)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		p.drain()
		stopped := make(chan struct{})
		go func() {
			p.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			p.logger.Warn("grace period over; cancelling the exchanges still open")
			p.grpc.Stop()
			<-stopped
		}
		// In-flight kafka-grpc calls finish and are committed within the
		// grace period; the rest go to the partitions' next owner.
		closeKafkaGRPC(ctx, p.kgrpc)
		closeKafka(p.kafka)
		p.cfg.Close()
		if p.admin != nil {
			_ = p.admin.Close()
		}
		p.wg.Wait()
	})
}

// startKafka connects one cluster (views, reply index, producers) per kafka
// binding and prepares what the routes use.
func startKafka(cfg *config.Config, readiness *admin.Readiness, logger *slog.Logger, partitionCheck time.Duration, keysClock func() time.Time,
	mm *modelMetrics) (map[string]*kafkaio.Cluster, *kafkaroute.Kafka, error) {
	clusters := make(map[string]*kafkaio.Cluster, len(cfg.Kafka))
	for name, k := range cfg.Kafka {
		opts := kafkaio.ClusterOptions{
			Name: name, Properties: k.Properties, KafkaTimeout: cfg.Limits.KafkaTimeout,
			MaxRecordBytes: int(cfg.Limits.RecordBytes()),
			ReplyRetention: cfg.Limits.ReplyRetention, ReplyIndexBytes: cfg.Limits.ReplyIndexBytes,
			IdempotencyWindow: cfg.Limits.IdempotencyWindow, IdempotencyKeys: cfg.Limits.IdempotencyKeys, KeysClock: keysClock,
			ViewIdle: cfg.Limits.ViewIdle, MaxViews: cfg.Limits.MaxViews, MaxViewBytes: cfg.Limits.MaxViewBytes,
			// A ring holds at least a stream's lag budget, so a stream within
			// its budget resumes from the ring.
			LogRingRecords: max(cfg.Limits.StreamLagBudget, 1024),
			Logger:         logger, Readiness: readiness, PartitionCheck: partitionCheck,
			Converters: mm.converters(name, k, logger),
			Decoders:   mm.decoders(name, k, logger),
		}
		if k.AnyViewOnDisk() {
			// One directory per binding: two clusters may have topics of
			// the same name.
			opts.ViewOnDisk, opts.ViewStoreDir = k.ViewOnDisk, filepath.Join(k.ViewStore.Directory, name)
		}
		c, err := kafkaio.NewCluster(opts)
		if err != nil {
			closeKafka(clusters)
			return nil, nil, err
		}
		clusters[name] = c
	}
	routes := kafkaroute.New(clusters)
	if err := routes.Prepare(cfg); err != nil {
		closeKafka(clusters)
		return nil, nil, err
	}
	return clusters, routes, nil
}

// sameKafka reports why a new configuration's kafka bindings differ from the
// running ones: clients are created at start, so such a change needs a
// restart.
func sameKafka(old, next *config.Config) error {
	if len(old.Kafka) != len(next.Kafka) {
		return fmt.Errorf("the kafka bindings changed (%d → %d): restart to apply", len(old.Kafka), len(next.Kafka))
	}
	for name, k := range next.Kafka {
		o, ok := old.Kafka[name]
		if !ok {
			return fmt.Errorf("kafka binding %q is new: restart to apply", name)
		}
		if !maps.Equal(o.Properties, k.Properties) {
			// Secrets read with ${file:} included: librdkafka takes its
			// credentials when the client is created.
			return fmt.Errorf("the options of kafka binding %q changed (a ${file:} secret among them counts): restart to apply", name)
		}
		if !sameTopicModels(o.Topics, k.Topics) {
			return fmt.Errorf("the topic models of kafka binding %q changed: restart to apply (views hold records converted with them)", name)
		}
		if !sameViewStores(o, k) {
			return fmt.Errorf("the view store of kafka binding %q changed: restart to apply (views are opened in their store)", name)
		}
	}
	if old.Limits != next.Limits {
		return errors.New("limits changed: restart to apply")
	}
	return nil
}

// sameViewStores reports whether two configurations of a cluster keep
// their views in the same places.
func sameViewStores(a, b *config.KafkaCluster) bool {
	if a.ViewStore.Disk != b.ViewStore.Disk || a.ViewStore.Directory != b.ViewStore.Directory || len(a.Topics) != len(b.Topics) {
		return false
	}
	for i := range a.Topics {
		if a.Topics[i].ViewStore != b.Topics[i].ViewStore {
			return false
		}
	}
	return true
}

func closeKafka(clusters map[string]*kafkaio.Cluster) {
	var wg sync.WaitGroup
	for _, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
}
