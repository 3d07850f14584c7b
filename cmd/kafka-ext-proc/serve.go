package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	cfgPath := fs.String("config", "", "configuration file (required)")
	listen := fs.String("listen", "127.0.0.1:50051", "ext_proc gRPC address; must be reachable by Envoy alone")
	adminAddr := fs.String("admin", "127.0.0.1:9090", "admin HTTP address (/metrics, /healthz, /readyz)")
	grace := fs.Duration("grace", 30*time.Second, "drain grace period on SIGTERM")
	level := fs.String("log-level", "info", "debug, info, warn or error")
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
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	p, err := stack.StartProcessor(stack.ProcessorOptions{Config: cfg, Listen: *listen, Admin: *adminAddr, Logger: logger})
	if err != nil {
		return err
	}
	logger.Info("serving", "ext_proc", p.Addr(), "admin", p.AdminAddr(), "config", *cfgPath)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			next, err := config.Load(*cfgPath)
			if err == nil {
				err = p.Reload(next)
			}
			if err != nil {
				logger.Error("reload refused; the previous configuration keeps serving", "config", *cfgPath, "err", err)
				continue
			}
			logger.Info("configuration reloaded", "config", *cfgPath)
		case <-ctx.Done():
			logger.Info("draining", "grace", *grace)
			gctx, cancel := context.WithTimeout(context.Background(), *grace)
			p.Shutdown(gctx)
			cancel()
			logger.Info("stopped")
			return nil
		}
	}
}
