//go:build !nodev

// Left out of -tags nodev builds (the production image): the development
// stack links the embedded broker and the Envoy emulator.

package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// DevOptions configure StartDev.
type DevOptions struct {
	Config *config.Config // its kafka bindings are pointed at the embedded broker, unless Existing
	// Existing runs against the configuration's own Kafka clusters, with
	// their bootstrap and security properties: no embedded broker starts
	// and no topic is created (the user's cluster has them, or refuses).
	Existing bool
	Envoy    []byte // envoy.yaml the emulator follows
	Front    string // emulator (HTTP/1.1 + h2c) address
	Listen   string // processor ext_proc address
	Kafka    string // embedded broker address
	Admin    string // admin address; "" = none
	Logger   *slog.Logger
	// BrokerOptions are extra embedded-broker options (tests). Its Topics are
	// created before the configuration's, so a test can give a topic more
	// partitions.
	BrokerOptions embedded.Options
	// Guards, WrapHTTP and WrapGRPC pass through to the processor (see
	// ProcessorOptions).
	Guards   processor.GuardChecker
	WrapHTTP func(handler.HTTPHandler) handler.HTTPHandler
	WrapGRPC func(handler.GRPCHandler) handler.GRPCHandler
	// Responders are started against the embedded broker once the topics
	// exist (their bootstrap.servers is set to it; with Existing, their
	// properties are used as given), before the processor.
	Responders []responder.Options
	// TracerProvider and PartitionCheck pass through to the processor.
	TracerProvider trace.TracerProvider
	PartitionCheck time.Duration
	// Replicas is how many processors run behind the emulator (0 = 1), as
	// endpoints of one ext_proc cluster. The first listens on Listen and
	// Admin; the others on free ports.
	Replicas int
}

// Dev is a running development stack: broker, processor and emulator.
type Dev struct {
	Broker     *embedded.Broker // nil with DevOptions.Existing
	Processor  *Processor       // the first replica
	Replicas   []*Processor     // every processor, Processor first
	Config     *config.Config
	Emulator   *Front
	Responders []*responder.Responder

	closeOnce sync.Once
}

// Front is the emulator's address, where clients connect.
func (d *Dev) Front() string { return d.Emulator.Addr() }

// StartDev starts the broker, creates the configuration's topics, and starts
// the responders, the processor and the emulator in front of it.
func StartDev(opts DevOptions) (_ *Dev, err error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	d := &Dev{Config: opts.Config}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if !opts.Existing {
		bopts := opts.BrokerOptions
		bopts.Addr = opts.Kafka
		bopts.Topics = append(bopts.Topics, TopicsOf(opts.Config)...)
		// A real cluster must take the largest record the limits allow
		// (docs/kafka.md); the embedded broker is set up to.
		bopts.MaxMessageBytes = max(bopts.MaxMessageBytes, opts.Config.Limits.RecordBytes())
		if bopts.Logger == nil {
			bopts.Logger = logger
		}
		if d.Broker, err = embedded.Start(bopts); err != nil {
			return nil, err
		}
		d.Config = PointAt(opts.Config, d.Broker.Addr())
	}

	for _, ro := range opts.Responders {
		if d.Broker != nil {
			props := make(map[string]string, len(ro.Properties)+1)
			for k, v := range ro.Properties {
				props[k] = v
			}
			props["bootstrap.servers"] = d.Broker.Addr()
			ro.Properties = props
		}
		if ro.Logger == nil {
			ro.Logger = logger
		}
		r, err := responder.Start(ro)
		if err != nil {
			return nil, err
		}
		d.Responders = append(d.Responders, r)
	}

	var addrs []string
	for i := range max(opts.Replicas, 1) {
		listen, admin, plog := opts.Listen, opts.Admin, logger
		if i > 0 {
			listen, admin = onFreePort(listen), onFreePort(admin)
			plog = logger.With("replica", i)
		}
		p, err := StartProcessor(ProcessorOptions{
			Config: d.Config, Listen: listen, Admin: admin, Logger: plog,
			Guards: opts.Guards, WrapHTTP: opts.WrapHTTP, WrapGRPC: opts.WrapGRPC,
			TracerProvider: opts.TracerProvider, PartitionCheck: opts.PartitionCheck,
		})
		if err != nil {
			return nil, err
		}
		d.Replicas = append(d.Replicas, p)
		addrs = append(addrs, p.Addr())
	}
	d.Processor = d.Replicas[0]
	d.Emulator, err = StartFrontCluster(opts.Envoy, opts.Front, addrs, logger)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Close stops the emulator, the processor, the responders and the broker.
func (d *Dev) Close() {
	d.closeOnce.Do(func() {
		if d.Emulator != nil {
			d.Emulator.Close()
		}
		for _, p := range d.Replicas {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			p.Shutdown(ctx)
			cancel()
		}
		for _, r := range d.Responders {
			r.Close()
		}
		if d.Broker != nil {
			d.Broker.Close()
		}
	})
}

// Front is the Envoy emulator serving on an address in front of a processor.
type Front struct {
	ln     net.Listener
	conns  []*grpc.ClientConn
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartFront starts the emulator on addr, following envoyYAML, in front of
// the processor at processorAddr.
func StartFront(envoyYAML []byte, addr, processorAddr string, logger *slog.Logger) (*Front, error) {
	return StartFrontCluster(envoyYAML, addr, []string{processorAddr}, logger)
}

// StartFrontCluster is StartFront in front of several processors, the
// endpoints of envoy.yaml's ext_proc cluster, picked round robin.
func StartFrontCluster(envoyYAML []byte, addr string, processorAddrs []string, logger *slog.Logger) (_ *Front, err error) {
	boot, err := envoy.Parse(envoyYAML)
	if err != nil {
		return nil, fmt.Errorf("reading envoy.yaml: %w", err)
	}
	settings, err := envoy.SettingsFrom(boot)
	if err != nil {
		return nil, fmt.Errorf("reading envoy.yaml: %w", err)
	}
	f := &Front{}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	var endpoints []grpc.ClientConnInterface
	for _, pa := range processorAddrs {
		conn, err := grpc.NewClient(pa, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connecting the emulator to the processor at %s: %w", pa, err)
		}
		f.conns = append(f.conns, conn)
		endpoints = append(endpoints, conn)
	}
	emu, err := emulator.New(emulator.Options{Settings: settings, Processors: endpoints, Logger: logger.With("component", "envoy-emulator")})
	if err != nil {
		return nil, fmt.Errorf("starting the Envoy emulator: %w", err)
	}
	f.ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for the emulator on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := emu.Serve(ctx, f.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && ctx.Err() == nil {
			logger.Error("emulator stopped", "err", err)
		}
	}()
	return f, nil
}

// Addr is the emulator's address, where clients connect.
func (f *Front) Addr() string { return f.ln.Addr().String() }

// Close stops the emulator.
func (f *Front) Close() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	if f.ln != nil {
		_ = f.ln.Close()
	}
	for _, c := range f.conns {
		_ = c.Close()
	}
}

// onFreePort is addr's host with port 0 ("" stays "": no listener).
func onFreePort(addr string) string {
	if addr == "" {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // StartProcessor reports it
	}
	return net.JoinHostPort(host, "0")
}

// PointAt returns a copy of cfg whose kafka bindings all use bootstrap.
func PointAt(cfg *config.Config, bootstrap string) *config.Config {
	out := *cfg
	out.Kafka = make(map[string]*config.KafkaCluster, len(cfg.Kafka))
	for name, k := range cfg.Kafka {
		kc := *k
		kc.Properties = make(map[string]string, len(k.Properties))
		for p, v := range k.Properties {
			kc.Properties[p] = v
		}
		kc.Properties["bootstrap.servers"] = bootstrap
		out.Kafka[name] = &kc
	}
	return &out
}

// TopicsOf lists the static topics a configuration names: topics read by a
// fetch route are compacted (http-kafka fetch reads compacted topics), the
// others are plain. Templated topics are left to their owners.
func TopicsOf(cfg *config.Config) []embedded.Topic {
	compact := map[string]bool{}
	add := func(name string, c bool) {
		if name == "" {
			return
		}
		compact[name] = compact[name] || c
	}
	for _, b := range cfg.Bindings {
		for _, r := range b.Routes {
			if r.With == nil {
				continue
			}
			if r.With.Topic.Static() {
				add(r.With.Topic.Raw, r.With.Capability == config.Fetch && b.Type == config.HTTPKafka)
			}
			add(r.With.ReplyTo, false)
		}
	}
	names := make([]string, 0, len(compact))
	for n := range compact {
		names = append(names, n)
	}
	sort.Strings(names)
	topics := make([]embedded.Topic, len(names))
	for i, n := range names {
		topics[i] = embedded.Topic{Name: n, Compact: compact[n]}
	}
	return topics
}
