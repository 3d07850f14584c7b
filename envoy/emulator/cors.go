package emulator

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// corsPolicy is a route's CORS policy with its origin matchers compiled.
type corsPolicy struct {
	envoy.CORSPolicy
	origins []func(string) bool
}

// compileCORS compiles the CORS policies of the settings' routes, keyed by
// the routes Client.Route returns.
func compileCORS(routes []envoy.Route) (map[*envoy.Route]*corsPolicy, error) {
	out := map[*envoy.Route]*corsPolicy{}
	for i := range routes {
		r := &routes[i]
		if r.CORS == nil {
			continue
		}
		p := &corsPolicy{CORSPolicy: *r.CORS}
		for _, m := range r.CORS.AllowOrigins {
			f, err := stringMatcher(m)
			if err != nil {
				return nil, fmt.Errorf("emulator: route %d (%q): CORS allow_origin_string_match: %w", i, r.Name, err)
			}
			p.origins = append(p.origins, f)
		}
		out[r] = p
	}
	return out, nil
}

// stringMatcher is Envoy's StringMatcher: safe_regex matches the whole
// value; ignore_case applies to exact, prefix, suffix and contains.
func stringMatcher(m envoy.StringMatch) (func(string) bool, error) {
	if m.Regex != "" {
		re, err := regexp.Compile(`^(?:` + m.Regex + `)$`)
		if err != nil {
			return nil, err
		}
		return re.MatchString, nil
	}
	fold := func(s string) string { return s }
	if m.IgnoreCase {
		fold = strings.ToLower
	}
	switch {
	case m.Prefix != "":
		return func(s string) bool { return strings.HasPrefix(fold(s), fold(m.Prefix)) }, nil
	case m.Suffix != "":
		return func(s string) bool { return strings.HasSuffix(fold(s), fold(m.Suffix)) }, nil
	case m.Contains != "":
		return func(s string) bool { return strings.Contains(fold(s), fold(m.Contains)) }, nil
	}
	return func(s string) bool { return fold(s) == fold(m.Exact) }, nil
}

// [rule cors-origin-allowed] An origin is allowed when an
// allow_origin_string_match matcher matches it or matches the string "*".
// source: source/extensions/filters/http/cors/cors_filter.cc CorsFilter::isOriginAllowed
// envoy-test: CorsFilterTest.OptionsRequestMatchingOriginByWildcard
// ours: TestCORSPreflight, TestCORSActualRequest
func (p *corsPolicy) originAllowed(origin string) bool {
	for _, m := range p.origins {
		if m("*") || m(origin) {
			return true
		}
	}
	return false
}

// preflight is the CORS filter's answer to a preflight from origin asking
// for reqMethod.
func (p *corsPolicy) preflight(h Headers, origin, reqMethod string, allowed bool) *LocalReply {
	// [rule cors-preflight] A preflight (OPTIONS with a non-empty origin
	// and access-control-request-method) is answered by the filter with
	// 200 and no body, unless its origin is not allowed and
	// forward_not_matching_preflights (default true) passes it on. The
	// answer carries access-control-allow-origin (the request's origin,
	// if allowed), -allow-credentials: true, -allow-methods and
	// -allow-headers ("*" echoes the request's access-control-request-*),
	// -max-age, and -allow-private-network when asked for and allowed.
	// The request goes no further: ext_proc never sees it.
	// source: source/extensions/filters/http/cors/cors_filter.cc CorsFilter::decodeHeaders
	// envoy-test: CorsFilterTest.ValidOptionsRequestWithAllowCredentialsTrue, CorsFilterTest.OptionsRequestNotMatchingOrigin
	// ours: TestCORSPreflight, e2e.TestCORSPreflightAnsweredByEnvoy
	var out Headers
	set := func(k, v string) { out = append(out, Header{Key: k, Value: v}) }
	if allowed {
		set("access-control-allow-origin", origin)
	}
	if p.AllowCredentials {
		set("access-control-allow-credentials", "true")
	}
	if m := p.AllowMethods; m == "*" {
		set("access-control-allow-methods", reqMethod)
	} else if m != "" {
		set("access-control-allow-methods", m)
	}
	if ah := p.AllowHeaders; ah == "*" {
		v, _ := h.Get("access-control-request-headers")
		set("access-control-allow-headers", v)
	} else if ah != "" {
		set("access-control-allow-headers", ah)
	}
	if p.MaxAge != "" {
		set("access-control-max-age", p.MaxAge)
	}
	if v, _ := h.Get("access-control-request-private-network"); p.AllowPrivateNetworkAccess && v == "true" {
		set("access-control-allow-private-network", "true")
	}
	return &LocalReply{Status: http.StatusOK, Headers: out, Details: "cors_response"}
}

// corsDecode is the CORS filter's decodeHeaders, run before ext_proc: it
// returns the preflight answer when the filter answers the request itself,
// and otherwise the headers its encodeHeaders adds to whatever answer the
// request gets (nil for none).
func (e *Emulator) corsDecode(h Headers, route *envoy.Route) (preflight *LocalReply, add Headers) {
	// [rule cors-route-entry] The CORS filter acts only on requests whose
	// route has a route action (a direct_response route has none) and a
	// CORS policy; others pass untouched.
	// source: source/extensions/filters/http/cors/cors_filter.cc CorsFilter::decodeHeaders, CorsFilter::initializeCorsPolicies
	// envoy-test: CorsFilterTest.NoRouteCorsEntry
	// ours: TestCORSOnlyOnRoutesWithPolicy
	p := e.cors[route]
	if route == nil || route.Cluster == "" || p == nil {
		return nil, nil
	}
	origin, _ := h.Get("origin")
	if origin == "" {
		return nil, nil
	}
	allowed := p.originAllowed(origin)
	method, _ := h.Get(":method")
	reqMethod, _ := h.Get("access-control-request-method")
	if method == http.MethodOptions && reqMethod != "" && (allowed || !p.ForwardNotMatchingPreflights) {
		return p.preflight(h, origin, reqMethod, allowed), nil
	}
	if !allowed {
		return nil, nil
	}
	// [rule cors-actual-request] Any other request with an allowed origin
	// gets, on whatever answer it receives (the processor's local replies
	// and streamed answers pass through every encoder filter),
	// access-control-allow-origin: its origin, -allow-credentials: true if
	// set, and -expose-headers, replacing the answer's own.
	// source: source/extensions/filters/http/cors/cors_filter.cc CorsFilter::encodeHeaders; source/common/http/filter_manager.cc FilterManager::sendLocalReplyViaFilterChain
	// envoy-test: CorsFilterTest.EncodeWithAllowCredentialsTrue
	// ours: TestCORSActualRequest, e2e.TestCORSActualRequestsCarryAllowOrigin
	add = Headers{{Key: "access-control-allow-origin", Value: origin}}
	if p.AllowCredentials {
		add = append(add, Header{Key: "access-control-allow-credentials", Value: "true"})
	}
	if p.ExposeHeaders != "" {
		add = append(add, Header{Key: "access-control-expose-headers", Value: p.ExposeHeaders})
	}
	return nil, add
}
