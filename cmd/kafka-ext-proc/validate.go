package main

import (
	"fmt"
	"io"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/guard"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

func validate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stderr)
	cfgPath := fs.String("config", "", "configuration file (required)")
	envoyPath := fs.String("envoy", "", "also check this envoy.yaml against the configuration's limits")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" {
		return usageError{"--config is required"}
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if err := checkKafkaProperties(cfg); err != nil {
		return err
	}
	// The loader checks the shape of JWKS; this checks the keys themselves.
	if _, err := guard.New(cfg); err != nil {
		return err
	}
	if *envoyPath != "" {
		b, err := envoy.Load(*envoyPath)
		if err != nil {
			return err
		}
		if err := envoy.Validate(b); err != nil {
			return fmt.Errorf("%s: %w", *envoyPath, err)
		}
		if err := envoy.Check(b, envoy.CheckOptions{MaxWait: cfg.Limits.MaxWait, ReplyTimeout: cfg.Limits.ReplyTimeout,
			SSEHeartbeat: cfg.Limits.SSEHeartbeat, PingMinTime: stack.KeepaliveMinTime}); err != nil {
			return fmt.Errorf("%s: %w", *envoyPath, err)
		}
	}
	config.Describe(cfg, stdout)
	fmt.Fprintf(stdout, "%s: valid\n", *cfgPath)
	if *envoyPath != "" {
		fmt.Fprintf(stdout, "%s: valid\n", *envoyPath)
	}
	return nil
}
