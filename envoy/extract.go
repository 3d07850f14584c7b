package envoy

import (
	"errors"
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs of the extensions this package looks into. Filters are recognised
// by type, not by name: Envoy only uses the name for per-route configs and stats.
const (
	typeURLPrefix = "type.googleapis.com/"
	hcmTypeURL    = typeURLPrefix + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	extProcType   = typeURLPrefix + "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
	extProcRoute  = typeURLPrefix + "envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
	routerType    = typeURLPrefix + "envoy.extensions.filters.http.router.v3.Router"
	jwtAuthnType  = typeURLPrefix + "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"
	corsType      = typeURLPrefix + "envoy.extensions.filters.http.cors.v3.Cors"
	filterCfgType = typeURLPrefix + "envoy.config.route.v3.FilterConfig"
)

// listenerHCM is a listener's HTTP connection manager, with where it was found.
type listenerHCM struct {
	where string
	hcm   *hcmv3.HttpConnectionManager
}

// hcmsOf returns the HTTP connection managers of a listener's filter chains
// (including the default chain), in order.
func hcmsOf(l *listenerv3.Listener) ([]listenerHCM, error) {
	chains := append([]*listenerv3.FilterChain(nil), l.GetFilterChains()...)
	if dc := l.GetDefaultFilterChain(); dc != nil {
		chains = append(chains, dc)
	}
	var out []listenerHCM
	for ci, fc := range chains {
		for fi, f := range fc.GetFilters() {
			if f.GetTypedConfig().GetTypeUrl() != hcmTypeURL {
				continue
			}
			where := fmt.Sprintf("listener %q filter_chains[%d].filters[%d] %q", l.GetName(), ci, fi, f.GetName())
			h := &hcmv3.HttpConnectionManager{}
			if err := unpack(f.GetTypedConfig(), h); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			out = append(out, listenerHCM{where: where, hcm: h})
		}
	}
	return out, nil
}

// extProcFilter is the ext_proc HTTP filter of an HCM, with its name (the key
// of its per-route configs) and its position in the filter chain.
type extProcFilter struct {
	name  string
	index int
	cfg   *extprocv3.ExternalProcessor
}

// extProcFiltersOf returns every ext_proc filter of an HCM's filter chain.
func extProcFiltersOf(h *hcmv3.HttpConnectionManager) ([]extProcFilter, error) {
	var out []extProcFilter
	for i, f := range h.GetHttpFilters() {
		if f.GetTypedConfig().GetTypeUrl() != extProcType {
			if f.GetConfigDiscovery() != nil {
				return nil, fmt.Errorf("http_filters[%d] %q: config_discovery (ECDS) is not supported; configure the filter inline", i, f.GetName())
			}
			continue
		}
		cfg := &extprocv3.ExternalProcessor{}
		if err := unpack(f.GetTypedConfig(), cfg); err != nil {
			return nil, fmt.Errorf("http_filters[%d] %q: %w", i, f.GetName(), err)
		}
		out = append(out, extProcFilter{name: f.GetName(), index: i, cfg: cfg})
	}
	return out, nil
}

// staticRoutes returns the HCM's inline route_config; RDS and scoped routes
// are refused because nothing here can resolve them.
func staticRoutes(h *hcmv3.HttpConnectionManager) (*routev3.RouteConfiguration, error) {
	switch {
	case h.GetRds() != nil:
		return nil, errors.New("routes come from RDS; only a static route_config is supported")
	case h.GetScopedRoutes() != nil:
		return nil, errors.New("scoped_routes are not supported; use a static route_config")
	case h.GetRouteConfig() == nil:
		return nil, errors.New("no route_config")
	}
	return h.GetRouteConfig(), nil
}

// perRoute is the effective ExtProcPerRoute of one route after Envoy's merge
// of the route configuration, virtual host and route levels.
type perRoute struct {
	disabled bool
	metadata []headerKV
	// overrides lists the ExtProcPerRoute override fields set at any level
	// other than grpc_initial_metadata, for callers that refuse them.
	overrides []string
	modes     []*extprocv3.ProcessingMode
	failOpen  bool
}

type headerKV struct{ key, value string }

// effectivePerRoute merges the ext_proc per-filter configs keyed by filterName
// from the least to the most specific level, as Envoy's FilterConfigPerRoute
// merge does (verified in ext_proc.cc): disabled comes from the most specific
// config; grpc_initial_metadata entries of a more specific config replace those
// with the same key, the others are appended.
func effectivePerRoute(filterName string, levels ...map[string]*anypb.Any) (perRoute, error) {
	var pr perRoute
	for _, level := range levels {
		a, ok := level[filterName]
		if !ok {
			continue
		}
		if a.GetTypeUrl() == filterCfgType {
			fc := &routev3.FilterConfig{}
			if err := unpack(a, fc); err != nil {
				return pr, fmt.Errorf("typed_per_filter_config %q: %w", filterName, err)
			}
			if fc.GetDisabled() {
				pr.disabled = true
				continue
			}
			if a = fc.GetConfig(); a == nil {
				continue
			}
		}
		c := &extprocv3.ExtProcPerRoute{}
		if err := unpack(a, c); err != nil {
			return pr, fmt.Errorf("typed_per_filter_config %q: %w", filterName, err)
		}
		pr.disabled = c.GetDisabled()
		o := c.GetOverrides()
		if o == nil {
			continue
		}
		for _, hv := range o.GetGrpcInitialMetadata() {
			pr.metadata = mergeHeader(pr.metadata, headerKV{hv.GetKey(), headerValue(hv.GetValue(), hv.GetRawValue())})
		}
		if o.GetProcessingMode() != nil {
			pr.overrides = append(pr.overrides, "processing_mode")
			pr.modes = append(pr.modes, o.GetProcessingMode())
		}
		if o.GetGrpcService() != nil {
			pr.overrides = append(pr.overrides, "grpc_service")
		}
		if o.GetMetadataOptions() != nil {
			pr.overrides = append(pr.overrides, "metadata_options")
		}
		if o.GetFailureModeAllow() != nil {
			pr.overrides = append(pr.overrides, "failure_mode_allow")
			pr.failOpen = o.GetFailureModeAllow().GetValue()
		}
		if o.GetProcessingRequestModifier() != nil {
			pr.overrides = append(pr.overrides, "processing_request_modifier")
		}
	}
	return pr, nil
}

func mergeHeader(list []headerKV, h headerKV) []headerKV {
	for i := range list {
		if list[i].key == h.key {
			list[i] = h
			return list
		}
	}
	return append(list, h)
}

// headerValue reads a HeaderValue used as gRPC metadata. Envoy's gRPC client
// takes `value`; raw_value is accepted as a fallback (assumed, not verified).
func headerValue(value string, raw []byte) string {
	if value != "" {
		return value
	}
	return string(raw)
}

// unpack decodes an Any into m, failing if the Any holds another type.
func unpack(a *anypb.Any, m proto.Message) error {
	if a == nil {
		return errors.New("no typed_config")
	}
	if err := a.UnmarshalTo(m); err != nil {
		return fmt.Errorf("unpacking %s: %w", a.GetTypeUrl(), err)
	}
	return nil
}
