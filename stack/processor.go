// Package stack wires the running parts together: the processor's gRPC
// server with health and the admin endpoints (for `serve`), and the whole
// development stack of embedded broker, processor and Envoy emulator (for
// `dev` and the end-to-end tests). It holds wiring only; behaviour lives in
// the packages it wires.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kafka-ext-proc/kafka-ext-proc/admin"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
)

// ProcessorOptions configure StartProcessor.
type ProcessorOptions struct {
	Config *config.Config
	Listen string // ext_proc gRPC address
	Admin  string // admin HTTP address; "" = no admin server
	Logger *slog.Logger
	// Guards checks guarded routes (nil: guarded routes fail closed).
	Guards processor.GuardChecker
	// WrapHTTP and WrapGRPC, when set, wrap the capability handlers (tests
	// observe what reaches them).
	WrapHTTP func(capability.HTTPHandler) capability.HTTPHandler
	WrapGRPC func(capability.GRPCHandler) capability.GRPCHandler
}

// Processor is a running ext_proc server with its health and admin endpoints.
type Processor struct {
	Server    *processor.Server
	Readiness *admin.Readiness
	Registry  *prometheus.Registry

	grpc      *grpc.Server
	health    *health.Server
	admin     *http.Server
	lis       net.Listener
	adminLis  net.Listener
	kafka     map[string]*kafkaio.Cluster
	drain     context.CancelFunc
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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	readiness := admin.NewReadiness()
	drainCtx, drain := context.WithCancel(context.Background())

	clients, err := startKafka(opts.Config, readiness, logger)
	if err != nil {
		drain()
		return nil, err
	}
	fetches := httpkafka.New(logger, clients)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kafka_ext_proc_fetch_waiters",
		Help: "HTTP fetch requests holding a long poll (prefer: wait) now.",
	}, func() float64 { return float64(fetches.Waiting()) }))
	var httpH capability.HTTPHandler = fetches
	var grpcH capability.GRPCHandler = grpckafka.New(logger)
	if opts.WrapHTTP != nil {
		httpH = opts.WrapHTTP(httpH)
	}
	if opts.WrapGRPC != nil {
		grpcH = opts.WrapGRPC(grpcH)
	}
	srv, err := processor.New(processor.Options{
		Config:     opts.Config,
		Logger:     logger,
		Registerer: reg,
		Drain:      drainCtx,
		Guards:     opts.Guards,
		HTTP:       httpH,
		GRPC:       grpcH,
	})
	if err != nil {
		closeKafka(clients)
		drain()
		return nil, fmt.Errorf("creating the processor: %w", err)
	}

	lis, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		closeKafka(clients)
		drain()
		return nil, fmt.Errorf("listening for ext_proc on %s: %w", opts.Listen, err)
	}
	p := &Processor{
		Server:    srv,
		Readiness: readiness,
		Registry:  reg,
		grpc:      grpc.NewServer(),
		health:    health.NewServer(),
		lis:       lis,
		kafka:     clients,
		drain:     drain,
		logger:    logger,
	}
	srv.Register(p.grpc)
	healthpb.RegisterHealthServer(p.grpc, p.health)
	readiness.Watch(func(ready bool) {
		status := healthpb.HealthCheckResponse_NOT_SERVING
		if ready {
			status = healthpb.HealthCheckResponse_SERVING
		}
		p.health.SetServingStatus("", status)
		p.health.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", status)
	})

	if opts.Admin != "" {
		alis, err := net.Listen("tcp", opts.Admin)
		if err != nil {
			lis.Close()
			closeKafka(clients)
			drain()
			return nil, fmt.Errorf("listening for admin on %s: %w", opts.Admin, err)
		}
		p.adminLis = alis
		p.admin = &http.Server{Handler: admin.Handler(reg, readiness), ReadHeaderTimeout: 10 * time.Second}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := p.admin.Serve(alis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("admin server stopped", "err", err)
			}
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.grpc.Serve(lis); err != nil {
			logger.Error("ext_proc server stopped", "err", err)
		}
	}()
	return p, nil
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
func (p *Processor) Reload(cfg *config.Config) error {
	if err := p.Server.Swap(cfg); err != nil {
		return fmt.Errorf("reloading the configuration: %w", err)
	}
	return nil
}

// Shutdown drains: health turns NOT_SERVING, long waits are told to finish
// (drain context), in-flight exchanges get until ctx ends, then everything
// stops.
func (p *Processor) Shutdown(ctx context.Context) {
	p.closeOnce.Do(func() {
		p.Readiness.Set("drain", false, "draining")
		p.health.Shutdown()
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
		closeKafka(p.kafka)
		if p.admin != nil {
			_ = p.admin.Close()
		}
		p.wg.Wait()
	})
}

// startKafka connects one cluster (views, reply index, producers) per kafka
// binding, warms the views of the static topics http-kafka fetch routes
// read, indexes every reply-to topic and creates the producers routes use,
// so that readiness means all of it is caught up.
func startKafka(cfg *config.Config, readiness *admin.Readiness, logger *slog.Logger) (map[string]*kafkaio.Cluster, error) {
	clusters := make(map[string]*kafkaio.Cluster, len(cfg.Kafka))
	for name, k := range cfg.Kafka {
		c, err := kafkaio.NewCluster(kafkaio.ClusterOptions{
			Name: name, Properties: k.Properties, KafkaTimeout: cfg.Limits.KafkaTimeout,
			ReplyRetention: cfg.Limits.ReplyRetention, ReplyIndexBytes: cfg.Limits.ReplyIndexBytes,
			Logger: logger, Readiness: readiness,
		})
		if err != nil {
			closeKafka(clusters)
			return nil, err
		}
		clusters[name] = c
	}
	for _, b := range cfg.Bindings {
		correlation := config.CorrelationHeaders{}
		switch {
		case b.HTTP != nil:
			correlation = b.HTTP.Correlation
		case b.GRPC != nil:
			correlation = b.GRPC.Correlation
		}
		for _, r := range b.Routes {
			c, ok := clusters[r.Exit]
			if !ok || r.With == nil {
				continue
			}
			switch r.With.Capability {
			case config.Fetch:
				if b.Type == config.HTTPKafka && r.With.Topic.Static() {
					c.Warm(r.With.Topic.Raw)
				}
			case config.Produce:
				if r.With.ReplyTo != "" {
					c.Replies.Add(r.With.ReplyTo, correlation.CorrelationID)
				}
				if _, err := c.Producer(kafkaio.AcksFromName(string(r.With.Acks))); err != nil {
					closeKafka(clusters)
					return nil, err
				}
			}
		}
	}
	return clusters, nil
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
