package envoy

import (
	"errors"
	"fmt"

	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// tracingOf says whether the HCM traces requests as the emulator can
// reproduce. Without a tracing block, or with one without a provider
// ("If not specified, no tracing will be performed", the field's
// documentation), Envoy's active span is a null span and nothing reaches
// the processor. The OpenTelemetry tracer is the
// one provider emulated: it propagates W3C traceparent, which the processor
// reads; any other provider, a sampler or a sampling percentage the
// emulator does not apply is refused rather than silently run differently.
func tracingOf(t *hcmv3.HttpConnectionManager_Tracing) (bool, error) {
	p := t.GetProvider()
	if p == nil {
		return false, nil
	}
	var otel tracev3.OpenTelemetryConfig
	if tc := p.GetTypedConfig(); tc == nil || !tc.MessageIs(&otel) {
		return false, fmt.Errorf("tracing provider %q is not emulated: only envoy.tracers.opentelemetry (OpenTelemetryConfig), whose W3C traceparent the processor reads", p.GetName())
	}
	if err := p.GetTypedConfig().UnmarshalTo(&otel); err != nil {
		return false, fmt.Errorf("tracing provider %q: %w", p.GetName(), err)
	}
	if otel.GetSampler() != nil {
		return false, errors.New("tracing: the OpenTelemetry sampler is not emulated (a request follows its traceparent's sampled flag, else is sampled)")
	}
	for _, s := range []struct {
		field string
		pct   *typev3.Percent
	}{{"client_sampling", t.GetClientSampling()}, {"random_sampling", t.GetRandomSampling()}, {"overall_sampling", t.GetOverallSampling()}} {
		if s.pct != nil && s.pct.GetValue() != 100 {
			return false, fmt.Errorf("tracing.%s %v%% is not emulated (every request is traced)", s.field, s.pct.GetValue())
		}
	}
	return true, nil
}
