package envoy

import (
	"errors"
	"fmt"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const corsPolicyType = typeURLPrefix + "envoy.extensions.filters.http.cors.v3.CorsPolicy"

// CORSPolicy is a route's effective CorsPolicy: each field from the most
// specific level (route, virtual host, route configuration) that sets it,
// as Envoy's CORS filter reads them.
type CORSPolicy struct {
	AllowOrigins  []StringMatch
	AllowMethods  string
	AllowHeaders  string
	ExposeHeaders string
	MaxAge        string
	// AllowCredentials, ForwardNotMatchingPreflights (Envoy default true)
	// and AllowPrivateNetworkAccess, resolved.
	AllowCredentials             bool
	ForwardNotMatchingPreflights bool
	AllowPrivateNetworkAccess    bool
}

// StringMatch is a StringMatcher: exactly one of its patterns is set.
type StringMatch struct {
	Exact, Prefix, Suffix, Contains, Regex string
	IgnoreCase                             bool
}

// corsFilterName is the name of the HCM's CORS filter ("" if none); a CORS
// filter after ext_proc is refused, since ext_proc answers every request
// before it would run.
func corsFilterName(h *hcmv3.HttpConnectionManager, extProcIndex int) (string, error) {
	for i, f := range h.GetHttpFilters() {
		if f.GetTypedConfig().GetTypeUrl() != corsType {
			continue
		}
		if i > extProcIndex {
			return "", fmt.Errorf("http_filters[%d] %q: a CORS filter after ext_proc is not supported", i, f.GetName())
		}
		return f.GetName(), nil
	}
	return "", nil
}

// corsPolicyOf merges the CorsPolicy per-filter configs keyed by filterName,
// levels ordered from the most specific. It returns nil when no level has one.
func corsPolicyOf(r *routev3.Route, vh *routev3.VirtualHost, filterName string, levels ...map[string]*anypb.Any) (*CORSPolicy, error) {
	//nolint:staticcheck // SA1019: the deprecated field is read only to refuse it
	if r.GetRoute().GetCors() != nil || vh.GetCors() != nil {
		return nil, errors.New("the deprecated cors field is not supported; use typed_per_filter_config")
	}
	ps, err := corsPolicies(filterName, levels)
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	return mergeCORS(filterName, ps)
}

// corsPolicies are the CorsPolicy per-filter configs keyed by filterName of
// the levels that have one, in the levels' order.
func corsPolicies(filterName string, levels []map[string]*anypb.Any) ([]*corsv3.CorsPolicy, error) {
	var ps []*corsv3.CorsPolicy
	for _, level := range levels {
		a, ok := level[filterName]
		if !ok {
			continue
		}
		if a.GetTypeUrl() != corsPolicyType {
			return nil, fmt.Errorf("typed_per_filter_config %q: type %s is not the CORS filter's per-route config (want %s)", filterName, a.GetTypeUrl(), corsPolicyType)
		}
		p := &corsv3.CorsPolicy{}
		if err := unpack(a, p); err != nil {
			return nil, fmt.Errorf("typed_per_filter_config %q: %w", filterName, err)
		}
		if p.GetFilterEnabled() != nil || p.GetShadowEnabled() != nil {
			return nil, fmt.Errorf("typed_per_filter_config %q: filter_enabled and shadow_enabled are not supported", filterName)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// mergeCORS takes each field from the first of ps, the most specific
// first, that sets it.
func mergeCORS(filterName string, ps []*corsv3.CorsPolicy) (*CORSPolicy, error) {
	c := &CORSPolicy{
		AllowMethods:                 firstSet(ps, (*corsv3.CorsPolicy).GetAllowMethods, ""),
		AllowHeaders:                 firstSet(ps, (*corsv3.CorsPolicy).GetAllowHeaders, ""),
		ExposeHeaders:                firstSet(ps, (*corsv3.CorsPolicy).GetExposeHeaders, ""),
		MaxAge:                       firstSet(ps, (*corsv3.CorsPolicy).GetMaxAge, ""),
		AllowCredentials:             firstBool(ps, (*corsv3.CorsPolicy).GetAllowCredentials, false),
		ForwardNotMatchingPreflights: firstBool(ps, (*corsv3.CorsPolicy).GetForwardNotMatchingPreflights, true),
		AllowPrivateNetworkAccess:    firstBool(ps, (*corsv3.CorsPolicy).GetAllowPrivateNetworkAccess, false),
	}
	for _, p := range ps {
		if len(c.AllowOrigins) > 0 {
			break
		}
		for _, m := range p.GetAllowOriginStringMatch() {
			sm, err := stringMatch(m)
			if err != nil {
				return nil, fmt.Errorf("typed_per_filter_config %q: allow_origin_string_match: %w", filterName, err)
			}
			c.AllowOrigins = append(c.AllowOrigins, sm)
		}
	}
	return c, nil
}

// firstSet is the first non-empty value get reads from ps, else def.
func firstSet(ps []*corsv3.CorsPolicy, get func(*corsv3.CorsPolicy) string, def string) string {
	for _, p := range ps {
		if v := get(p); v != "" {
			return v
		}
	}
	return def
}

// firstBool is the value of the first of ps that sets the field get reads,
// else def.
func firstBool(ps []*corsv3.CorsPolicy, get func(*corsv3.CorsPolicy) *wrapperspb.BoolValue, def bool) bool {
	for _, p := range ps {
		if v := get(p); v != nil {
			return v.GetValue()
		}
	}
	return def
}

func stringMatch(m *matcherv3.StringMatcher) (StringMatch, error) {
	s := StringMatch{IgnoreCase: m.GetIgnoreCase()}
	switch {
	case m.GetSafeRegex() != nil:
		s.Regex = m.GetSafeRegex().GetRegex()
	case m.GetCustom() != nil:
		return s, errors.New("custom string matchers are not supported")
	default:
		s.Exact, s.Prefix, s.Suffix, s.Contains = m.GetExact(), m.GetPrefix(), m.GetSuffix(), m.GetContains()
	}
	return s, nil
}
