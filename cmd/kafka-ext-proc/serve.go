package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/tlsconf"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	cfgPath := fs.String("config", "", "configuration file (required)")
	listen := fs.String("listen", "127.0.0.1:50051", "ext_proc gRPC address; must be reachable by Envoy alone")
	adminAddr := fs.String("admin", "127.0.0.1:9090", "admin HTTP address (/metrics, /healthz, /readyz)")
	grace := fs.Duration("grace", 30*time.Second, "drain grace period on SIGTERM")
	drainDelay := fs.Duration("drain-delay", 5*time.Second, "on SIGTERM, keep serving this long after health turns NOT_SERVING (one Envoy health-check interval)")
	watch := fs.Duration("watch", 2*time.Second, "check the configuration file and the files it reads (${file:} secrets, keys-file) for changes this often (0: only on SIGHUP)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	otlp := fs.String("otlp-endpoint", "", "export a span per request to this OTLP collector (host:port or URL; default OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT); off when none is set")
	otlpProtocol := fs.String("otlp-protocol", "", "grpc or http/protobuf (default OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)")
	otlpInsecure := fs.Bool("otlp-insecure", false, "talk to the OTLP collector without TLS")
	tlsCert := fs.String("tls-cert", "", "PEM certificate chain for TLS on the ext_proc port")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "PEM CA certificates; clients (Envoy) must present a certificate they issued (mTLS)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" {
		return usageError{"--config is required"}
	}
	logger, err := newLogger(stderr, *level, true)
	if err != nil {
		return err
	}
	tlsCfg, err := tlsconf.Server(*tlsCert, *tlsKey, *tlsClientCA)
	if err != nil {
		return usageError{fmt.Sprintf("--tls-cert/--tls-key/--tls-client-ca: %v", err)}
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	popts := stack.ProcessorOptions{
		Config: cfg, Listen: *listen, Admin: *adminAddr, Logger: logger,
		DrainDelay: *drainDelay, TLS: tlsCfg,
	}
	tp, err := stack.OTLPTracing(ctx, stack.OTLPOptions{Endpoint: *otlp, Protocol: *otlpProtocol, Insecure: *otlpInsecure})
	if err != nil {
		return usageError{fmt.Sprintf("tracing: %v", err)}
	}
	if tp != nil {
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx)
		}()
		popts.TracerProvider = tp
	}
	p, err := stack.StartProcessor(popts)
	if err != nil {
		return err
	}
	logger.Info("serving", "ext_proc", p.Addr(), "admin", p.AdminAddr(), "config", *cfgPath)
	return serveUntilDone(ctx, p, logger, *cfgPath, *watch, *grace)
}

// serveUntilDone reloads the configuration on SIGHUP or a change of its
// file or of a file it reads (checked every watch; 0: only on SIGHUP), and
// drains when ctx ends.
func serveUntilDone(ctx context.Context, p *stack.Processor, logger *slog.Logger, cfgPath string, watch, grace time.Duration) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fileChanged := make(chan struct{}, 1)
	if watch > 0 {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		files := func() []string { return append([]string{cfgPath}, p.Files()...) }
		go stack.WatchFiles(wctx, watch, files, func() {
			select {
			case fileChanged <- struct{}{}:
			default:
			}
		})
	}
	reload := func() {
		if err := p.ReloadFrom(func() (*config.Config, error) { return config.Load(cfgPath) }); err != nil {
			logger.Error("reload refused; the previous configuration keeps serving", "config", cfgPath, "err", err)
			return
		}
		logger.Info("configuration reloaded", "config", cfgPath)
	}
	for {
		select {
		case <-hup:
			reload()
		case <-fileChanged:
			reload()
		case <-ctx.Done():
			logger.Info("draining", "grace", grace)
			gctx, cancel := context.WithTimeout(context.Background(), grace)
			p.Shutdown(gctx)
			cancel()
			logger.Info("stopped")
			return nil
		}
	}
}
