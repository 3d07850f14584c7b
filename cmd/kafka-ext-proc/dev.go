//go:build !nodev

// The development stack (embedded broker, Envoy emulator) is left out of
// builds with -tags nodev, as the Dockerfile builds the production image;
// dev_nodev.go stands in for it there.

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the bundled demo)")
	envoyPath := fs.String("envoy", "", "envoy.yaml the emulator follows (default: the bundled envoy/envoy.yaml)")
	front := fs.String("front", "127.0.0.1:8080", "Envoy emulator address (HTTP/1.1 and h2c)")
	listen := fs.String("listen", "127.0.0.1:50051", "processor ext_proc address")
	kafka := fs.String("kafka", "127.0.0.1:9092", "embedded Kafka broker address")
	adminAddr := fs.String("admin", "127.0.0.1:9090", "admin HTTP address (/metrics, /healthz, /readyz)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	var extra responderFlag
	fs.Var(&extra, "responder", responderUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := newLogger(stderr, *level, false)
	if err != nil {
		return err
	}
	var cfg *config.Config
	var responders []responder.Options
	if *cfgPath == "" {
		cfg, err = config.Parse("demo.yaml", demoConfig, os.LookupEnv)
		// The demo's request-reply route needs someone to answer.
		responders = append(responders, responder.Options{
			Topic: "orders-requests", ReplyTo: "orders-responses", Handler: responder.HTTPEcho(),
		}, responder.Options{
			Topic: "echo-requests", ReplyTo: "echo-responses", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey,
		})
	} else {
		cfg, err = config.Load(*cfgPath)
	}
	if err != nil {
		return err
	}
	more, err := extra.options(cfg, responders)
	if err != nil {
		return err
	}
	responders = append(responders, more...)
	envoyYAML := envoy.DefaultYAML()
	if *envoyPath != "" {
		if envoyYAML, err = os.ReadFile(*envoyPath); err != nil {
			return fmt.Errorf("reading %s: %w", *envoyPath, err)
		}
	}
	d, err := stack.StartDev(stack.DevOptions{
		Config: cfg, Envoy: envoyYAML,
		Front: *front, Listen: *listen, Kafka: *kafka, Admin: *adminAddr,
		Logger: logger, Responders: responders,
	})
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprint(stdout, banner(d))
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping")
	return nil
}

// banner tells a newcomer where everything is and what to try.
func banner(d *stack.Dev) string {
	var b strings.Builder
	front := d.Front()
	fmt.Fprintf(&b, "kafka-ext-proc dev is running\n")
	fmt.Fprintf(&b, "  front (Envoy emulator): http://%s\n", front)
	fmt.Fprintf(&b, "  processor (ext_proc):   %s\n", d.Processor.Addr())
	fmt.Fprintf(&b, "  Kafka (embedded):       %s\n", d.Broker.Addr())
	if a := d.Processor.AdminAddr(); a != "" {
		fmt.Fprintf(&b, "  admin:                  http://%s/readyz  http://%s/metrics\n", a, a)
	}
	for _, r := range d.Responders {
		fmt.Fprintf(&b, "  demo responder:         answers %s\n", r.Topic())
	}
	fmt.Fprintf(&b, "\nTry:\n")
	for _, line := range tryLines(d.Config, front) {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	fmt.Fprintf(&b, "\nCtrl-C stops it.\n")
	return b.String()
}

// tryLines renders one request per route condition, with path parameters
// filled in, so the lines always match the configuration being run.
func tryLines(cfg *config.Config, front string) []string {
	var lines []string
	seen := map[string]bool{}
	for _, bnd := range cfg.Bindings {
		for _, r := range bnd.Routes {
			for _, c := range r.When {
				var line string
				switch bnd.Type {
				case config.HTTPKafka:
					if c.Path == nil {
						continue
					}
					line = curlLine(c, r.With, front)
				case config.GRPCKafka:
					line = grpcurlLine(c, front)
				}
				if line != "" && !seen[line] {
					seen[line] = true
					lines = append(lines, line)
				}
			}
		}
	}
	return lines
}

func curlLine(c config.Condition, with *config.With, front string) string {
	var path strings.Builder
	for _, p := range c.Path.Parts {
		switch {
		case p.Param == "correlationId":
			path.WriteString("CORRELATION-ID")
		case p.Param != "":
			path.WriteString("1")
		default:
			path.WriteString(p.Literal)
		}
	}
	method := c.Method
	if method == "" {
		method = "PUT"
	}
	url := "http://" + front + path.String()
	switch {
	case method == "GET" || method == "DELETE" || method == "HEAD":
		if method == "GET" {
			return fmt.Sprintf("curl -i '%s'", url)
		}
		return fmt.Sprintf("curl -i -X %s '%s'", method, url)
	case with != nil && with.Capability == config.Produce && len(with.Async) > 0:
		return fmt.Sprintf("curl -i -X %s '%s' -H 'content-type: application/json' -H 'prefer: respond-async' -d '{\"qty\":1}'", method, url)
	default:
		return fmt.Sprintf("curl -i -X %s '%s' -H 'content-type: application/json' -d '{\"name\":\"pen\"}'", method, url)
	}
}

// grpcurlLine names a gRPC route. The processor serves no reflection (the
// methods are the user's), so grpcurl needs the user's protos; the line says so.
func grpcurlLine(c config.Condition, front string) string {
	method := c.GRPCMethod
	if method == "" {
		method = c.Service + "/*"
	}
	if method == "/*" {
		return ""
	}
	return fmt.Sprintf("grpcurl -plaintext -proto YOUR.proto -d '{}' %s %s", front, strings.Replace(method, "/*", "/METHOD", 1))
}
