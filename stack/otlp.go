package stack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/buildinfo"
)

// OTLPOptions choose where the processor's spans go. Each empty field
// falls back to the standard OpenTelemetry environment variable, so a
// deployment configured for other OpenTelemetry services works unchanged;
// a flag overrides its variable.
type OTLPOptions struct {
	// Endpoint is host:port or a URL (http:// means without TLS). Empty:
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, read
	// by the exporter itself (with OTEL_EXPORTER_OTLP_HEADERS,
	// _CERTIFICATE, _TIMEOUT, ...); neither set: tracing is off.
	Endpoint string
	// Protocol is grpc or http/protobuf. Empty:
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, grpc.
	Protocol string
	// Insecure talks to the collector without TLS.
	Insecure bool
	// Getenv reads the environment (nil: os.LookupEnv).
	Getenv func(string) (string, bool)
}

// OTLPTracing exports the processor's spans to an OTLP collector. It is
// nil, without error, when no endpoint is configured or the environment
// turns tracing off (OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none).
// The resource is service.name kafka-ext-proc (OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override it); the sampler follows
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
// parentbased_always_on). Shut the provider down on exit to flush the last
// spans.
func OTLPTracing(ctx context.Context, o OTLPOptions) (*sdktrace.TracerProvider, error) {
	env := o.Getenv
	if env == nil {
		env = os.LookupEnv
	}
	get := func(names ...string) string {
		for _, n := range names {
			if v, ok := env(n); ok && strings.TrimSpace(v) != "" {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	if o.Endpoint == "" {
		switch exp := get("OTEL_TRACES_EXPORTER"); exp {
		case "", "otlp":
		case "none":
			return nil, nil
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: kafka-ext-proc exports otlp (or none)", exp)
		}
		if get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
			return nil, nil
		}
	}
	protocol := o.Protocol
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	sampler, err := samplerFromEnv(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, err
	}
	exp, err := otlpExporter(ctx, protocol, o.Endpoint, o.Insecure)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "kafka-ext-proc"), attribute.String("service.version", buildinfo.Read().Version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: later detectors win
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("reading OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler)), nil
}

func otlpExporter(ctx context.Context, protocol, endpoint string, insecure bool) (sdktrace.SpanExporter, error) {
	var u *url.URL
	if strings.Contains(endpoint, "://") {
		var err error
		if u, err = url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("OTLP endpoint %q: want host:port or an http:// or https:// URL", endpoint)
		}
	}
	where := endpoint
	if where == "" {
		where = "the endpoint of OTEL_EXPORTER_OTLP_*ENDPOINT"
	}
	switch protocol {
	case "", "grpc":
		var opts []otlptracegrpc.Option
		switch {
		case u != nil:
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		case endpoint != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(endpoint))
		}
		if insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("creating the OTLP/gRPC exporter for %s: %w", where, err)
		}
		return exp, nil
	case "http/protobuf":
		var opts []otlptracehttp.Option
		switch {
		case u != nil:
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces" // the signal's path, as for OTEL_EXPORTER_OTLP_ENDPOINT
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		case endpoint != "":
			opts = append(opts, otlptracehttp.WithEndpoint(endpoint))
		}
		if insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("creating the OTLP/HTTP exporter for %s: %w", where, err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf", protocol)
}

// samplerFromEnv reads OTEL_TRACES_SAMPLER and its argument, refusing what
// it does not know (the SDK would fall back silently).
func samplerFromEnv(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%s: want a ratio from 0 to 1", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, errors.New("OTEL_TRACES_SAMPLER=" + name + ": want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
}
