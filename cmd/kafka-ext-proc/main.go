// Command kafka-ext-proc is an Envoy external processor that turns REST and
// gRPC request streams into Kafka topic streams.
//
//	kafka-ext-proc serve    --config FILE [--listen ADDR] [--admin ADDR]
//	kafka-ext-proc dev      [--config FILE] [--envoy FILE] [--front ADDR] [--listen ADDR] [--kafka ADDR|existing] [--admin ADDR]
//	                        [--responder KIND:TOPIC]... [--replicas N] [--processor ADDR] [--log-level LEVEL]
//	                        [--data DIR] [--partitions N] [--topic NAME[:PARTITIONS]]... [--registry ADDR] [--schema SUBJECT=FILE]...
//	kafka-ext-proc validate --config FILE [--envoy FILE]
//	kafka-ext-proc responder --config FILE --responder KIND:TOPIC...
//	kafka-ext-proc openapi  --config FILE [--binding NAME] [--format yaml|json] [--server URL]
//	kafka-ext-proc healthcheck [--admin ADDR] [--path /readyz]
//	kafka-ext-proc import zilla FILE [--envoy FILE]   (translate a zilla.yaml; prints the configuration)
//	kafka-ext-proc version  (or --version)
//
// serve runs the processor; dev runs it with an embedded Kafka, an Envoy
// emulator and demo responders in one process; validate checks a
// configuration (and an envoy.yaml against it); responder runs the demo
// responders on their own; openapi prints the OpenAPI 3.1 document of a
// configuration's HTTP routes; healthcheck asks a running processor's admin
// server whether it is ready, for container health checks; import translates
// a Zilla configuration; version prints the build. The usage text above is
// the one the command prints (main_test.go keeps the two alike).
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

//go:embed demo.yaml
var demoConfig []byte

const usage = `kafka-ext-proc: an Envoy external processor that maps HTTP and gRPC onto Kafka.

Usage:
  kafka-ext-proc serve    --config FILE [--listen ADDR] [--admin ADDR]
  kafka-ext-proc dev      [--config FILE] [--envoy FILE] [--front ADDR] [--listen ADDR] [--kafka ADDR|existing] [--admin ADDR]
                          [--responder KIND:TOPIC]... [--replicas N] [--processor ADDR] [--log-level LEVEL]
                          [--data DIR] [--partitions N] [--topic NAME[:PARTITIONS]]... [--registry ADDR] [--schema SUBJECT=FILE]...
  kafka-ext-proc validate --config FILE [--envoy FILE]
  kafka-ext-proc responder --config FILE --responder KIND:TOPIC...
  kafka-ext-proc openapi  --config FILE [--binding NAME] [--format yaml|json] [--server URL]
  kafka-ext-proc healthcheck [--admin ADDR] [--path /readyz]
  kafka-ext-proc import zilla FILE [--envoy FILE]   (translate a zilla.yaml; prints the configuration)
  kafka-ext-proc version  (or --version)

Run 'kafka-ext-proc COMMAND -h' for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes a command and returns the process exit code: 0 success, 1
// failure, 2 usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "dev":
		err = dev(ctx, args[1:], stdout, stderr)
	case "validate":
		err = validate(args[1:], stdout, stderr)
	case "openapi":
		err = openAPI(args[1:], stdout, stderr)
	case "healthcheck":
		err = healthcheck(ctx, args[1:], stdout, stderr)
	case "responder":
		err = responderCmd(ctx, args[1:], stdout, stderr)
	case "import":
		err = importCmd(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		err = version(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "kafka-ext-proc: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "kafka-ext-proc %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "kafka-ext-proc %s: %v\n", args[0], err)
		return 1
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kafka-ext-proc "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func newLogger(w io.Writer, level string, json bool) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: l}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
