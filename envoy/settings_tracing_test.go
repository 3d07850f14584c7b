package envoy

import (
	"os"
	"strings"
	"testing"
)

// The shipped tracing blocks pass every check once uncommented and turn the
// emulator's tracing on; without them it is off.
func TestTracingExample(t *testing.T) {
	s, err := SettingsFrom(shippedWith(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Tracing {
		t.Error("Tracing on for the shipped file, whose tracing block is commented")
	}
	s, err = SettingsFrom(shippedWith(t, "tracing", "tracing-cluster"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Tracing {
		t.Error("Tracing off with the tracing block uncommented")
	}
}

// What the emulator cannot reproduce of a tracing block is refused, saying
// what; a block without a provider traces nothing, as in Envoy.
func TestTracingSettings(t *testing.T) {
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	base := string(uncommented(t, data, "tracing", "tracing-cluster"))
	const provider = `          tracing:
            provider:
              name: envoy.tracers.opentelemetry
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                grpc_service: { envoy_grpc: { cluster_name: otel_collector }, timeout: 1s }
                service_name: envoy
`
	if !strings.Contains(base, provider) {
		t.Fatalf("the uncommented tracing block is not\n%s", provider)
	}
	for _, c := range []struct {
		name, block string
		on          bool
		want        string
	}{
		{"no provider", "          tracing: {}\n", false, ""},
		{"zipkin", `          tracing:
            provider:
              name: envoy.tracers.zipkin
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.ZipkinConfig
                collector_cluster: otel_collector
                collector_endpoint: /api/v2/spans
                collector_endpoint_version: HTTP_JSON
`, false, `tracing provider "envoy.tracers.zipkin" is not emulated`},
		{"random sampling", strings.Replace(provider, "          tracing:\n", "          tracing:\n            random_sampling: { value: 10 }\n", 1), false, "tracing.random_sampling 10% is not emulated"},
		{"full sampling", strings.Replace(provider, "          tracing:\n", "          tracing:\n            overall_sampling: { value: 100 }\n", 1), true, ""},
		{"sampler", strings.Replace(provider, "                service_name: envoy\n", `                service_name: envoy
                sampler:
                  name: envoy.tracers.opentelemetry.samplers.always_on
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.tracers.opentelemetry.samplers.v3.AlwaysOnSamplerConfig
`, 1), false, "sampler is not emulated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Parse([]byte(strings.Replace(base, provider, c.block, 1)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			s, err := SettingsFrom(b)
			if c.want != "" {
				wantErr(t, "SettingsFrom", err, c.want, "ingress")
				return
			}
			if err != nil || s.Tracing != c.on {
				t.Errorf("Tracing %v (%v), want %v", s.Tracing, err, c.on)
			}
		})
	}
}

// The bootstrap's deprecated tracing is refused rather than ignored.
func TestBootstrapTracingRefused(t *testing.T) {
	b, err := Parse(edited(t, "static_resources:\n", "tracing: { http: { name: envoy.tracers.opentelemetry, typed_config: { \"@type\": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig } } }\nstatic_resources:\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	_, err = SettingsFrom(b)
	wantErr(t, "SettingsFrom", err, "bootstrap's tracing (deprecated) is not emulated")
}
