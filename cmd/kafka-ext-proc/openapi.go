package main

import (
	"fmt"
	"io"

	"github.com/kafka-ext-proc/kafka-ext-proc/openapi"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// openAPI prints the OpenAPI 3.1 document of a configuration's HTTP routes.
func openAPI(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("openapi", stderr)
	cfgPath := fs.String("config", "", "configuration file (required)")
	binding := fs.String("binding", "", "http-kafka or sse-kafka binding to describe (required when the configuration has several)")
	format := fs.String("format", "yaml", "yaml or json")
	title := fs.String("title", "", `info.title (default "kafka-ext-proc: BINDING")`)
	version := fs.String("api-version", "1.0.0", "info.version")
	server := fs.String("server", "", "server URL to list, e.g. the Envoy listener http://localhost:8080")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" {
		return usageError{"--config is required"}
	}
	if *format != "yaml" && *format != "json" {
		return usageError{fmt.Sprintf("--format %q: want yaml or json", *format)}
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	opts := openapi.Options{Binding: *binding, Title: *title, Version: *version}
	if *server != "" {
		opts.Servers = []string{*server}
	}
	doc, err := openapi.Generate(cfg, opts)
	if err != nil {
		return err
	}
	var out []byte
	if *format == "json" {
		out, err = doc.JSON()
	} else {
		out, err = doc.YAML()
	}
	if err != nil {
		return err
	}
	if _, err := stdout.Write(out); err != nil {
		return fmt.Errorf("writing the document: %w", err)
	}
	return nil
}
