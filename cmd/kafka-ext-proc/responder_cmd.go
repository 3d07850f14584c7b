package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// responderCmd runs demo responders for request-reply routes of a
// configuration, against the Kafka cluster those routes use: what `dev
// --responder` starts beside its embedded broker, as a process of its own
// (docker-compose runs it beside the processor).
func responderCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("responder", stderr)
	cfgPath := fs.String("config", "", "configuration file whose request-reply routes the responders answer (required)")
	var specs responderFlag
	fs.Var(&specs, "responder", responderUsage+" (at least one)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" || len(specs) == 0 {
		return usageError{"--config and at least one --responder are required"}
	}
	logger, err := newLogger(stderr, *level, true)
	if err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	opts, err := specs.options(cfg, nil)
	if err != nil {
		return err
	}
	for _, o := range opts {
		o.Logger = logger
		r, err := responder.Start(o)
		if err != nil {
			return err
		}
		defer r.Close()
		fmt.Fprintf(stdout, "answering %s (bootstrap.servers %s)\n", r.Topic(), o.Properties["bootstrap.servers"])
	}
	<-ctx.Done()
	return nil
}
