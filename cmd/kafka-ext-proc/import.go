package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/zillaimport"
)

// importCmd is `import zilla FILE [--envoy FILE]`: it prints the translated
// configuration and, with --envoy, writes an Envoy bootstrap for it.
func importCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "zilla" {
		return usageError{"want `import zilla FILE [--envoy FILE]`"}
	}
	fs := newFlags("import zilla", stderr)
	envoyOut := fs.String("envoy", "", "also write an Envoy configuration (envoy.yaml) to this file")
	// The file may come before or after the flags.
	rest := args[1:]
	var file string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		file, rest = rest[0], rest[1:]
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
	} else {
		if err := fs.Parse(rest); err != nil {
			// Parse printed the usage already; parsing again would print it twice.
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err.Error()}
		}
		if fs.NArg() != 1 {
			return usageError{"want `import zilla FILE [--envoy FILE]`"}
		}
		file = fs.Arg(0)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading the Zilla configuration: %w", err)
	}
	res, err := zillaimport.Import(file, src)
	if err != nil {
		return err
	}
	if *envoyOut != "" {
		if err := os.WriteFile(*envoyOut, res.Envoy, 0o644); err != nil {
			return fmt.Errorf("writing the Envoy configuration: %w", err)
		}
	}
	_, err = stdout.Write(res.Config)
	return err
}
