package envoy

import (
	"errors"
	"fmt"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Envoy's defaults for fields the settings need when they are unset.
const (
	defaultStreamIdleTimeout   = 5 * time.Minute        // HCM stream_idle_timeout
	defaultMaxRequestHeadersKB = 60                     // HCM max_request_headers_kb
	defaultStatusOnError       = 500                    // ext_proc status_on_error
	defaultMessageTimeout      = 200 * time.Millisecond // ext_proc message_timeout
	defaultRouteTimeout        = 15 * time.Second       // route timeout
)

// SettingsFrom reduces a bootstrap to the Settings of its first listener: that
// listener's single HTTP connection manager, its single ext_proc filter and its
// static route configuration. It refuses, with an error saying what, whatever
// Settings cannot express (RDS, several virtual hosts or domains other than
// "*", matchers other than prefix/path/grpc, actions other than a cluster or a
// direct response, per-route overrides other than grpc_initial_metadata), so
// that the emulator never silently runs something other than the file says.
func SettingsFrom(b *bootstrapv3.Bootstrap) (Settings, error) {
	var s Settings
	ls := b.GetStaticResources().GetListeners()
	if len(ls) == 0 {
		return s, errors.New("envoy settings: no static listener (LDS is not supported)")
	}
	l := ls[0]
	hs, err := hcmsOf(l)
	if err != nil {
		return s, fmt.Errorf("envoy settings: %w", err)
	}
	if len(hs) != 1 {
		return s, fmt.Errorf("envoy settings: listener %q has %d HTTP connection managers, want exactly 1", l.GetName(), len(hs))
	}
	h := hs[0].hcm
	where := hs[0].where

	s.CodecType = h.GetCodecType().String()
	s.StreamIdleTimeout = durationOr(h.GetStreamIdleTimeout(), defaultStreamIdleTimeout)
	s.RequestTimeout = durationOr(h.GetRequestTimeout(), 0)
	s.MaxRequestHeadersKB = defaultMaxRequestHeadersKB
	if v := h.GetMaxRequestHeadersKb(); v != nil {
		s.MaxRequestHeadersKB = int(v.GetValue())
	}

	//nolint:staticcheck // SA1019: the deprecated bootstrap tracing is read only to refuse it
	if b.GetTracing() != nil {
		return s, errors.New("envoy settings: the bootstrap's tracing (deprecated) is not emulated; name the provider in the connection manager's tracing")
	}
	if s.Tracing, err = tracingOf(h.GetTracing()); err != nil {
		return s, fmt.Errorf("envoy settings: %s: %w", where, err)
	}
	ep, err := theExtProcFilter(h)
	if err != nil {
		return s, fmt.Errorf("envoy settings: %s: %w", where, err)
	}
	s.ExtProc = extProcSettings(ep)
	if s.Routes, err = routesOf(h, ep); err != nil {
		return s, fmt.Errorf("envoy settings: %s: %w", where, err)
	}
	return s, nil
}

// theExtProcFilter is the connection manager's one ext_proc filter, which
// must reach its processor through an Envoy cluster.
func theExtProcFilter(h *hcmv3.HttpConnectionManager) (extProcFilter, error) {
	eps, err := extProcFiltersOf(h)
	if err != nil {
		return extProcFilter{}, err
	}
	if len(eps) != 1 {
		return extProcFilter{}, fmt.Errorf("%d ext_proc filters, want exactly 1", len(eps))
	}
	ep := eps[0]
	if ep.cfg.GetHttpService() != nil || ep.cfg.GetGrpcService().GetGoogleGrpc() != nil {
		return extProcFilter{}, fmt.Errorf("ext_proc filter %q must use grpc_service.envoy_grpc", ep.name)
	}
	return ep, nil
}

// extProcSettings reduces the ext_proc filter's configuration, with Envoy's
// defaults for what it leaves unset.
func extProcSettings(ep extProcFilter) ExtProc {
	gs := ep.cfg.GetGrpcService()
	pm := ep.cfg.GetProcessingMode()
	x := ExtProc{
		ClusterName:          gs.GetEnvoyGrpc().GetClusterName(),
		Authority:            gs.GetEnvoyGrpc().GetAuthority(),
		RequestHeaderMode:    pm.GetRequestHeaderMode().String(),
		RequestBodyMode:      pm.GetRequestBodyMode().String(),
		RequestTrailerMode:   pm.GetRequestTrailerMode().String(),
		ResponseHeaderMode:   pm.GetResponseHeaderMode().String(),
		ResponseBodyMode:     pm.GetResponseBodyMode().String(),
		ResponseTrailerMode:  pm.GetResponseTrailerMode().String(),
		FailureModeAllow:     ep.cfg.GetFailureModeAllow(),
		StatusOnError:        defaultStatusOnError,
		MessageTimeout:       durationOr(ep.cfg.GetMessageTimeout(), defaultMessageTimeout),
		ForwardingNamespaces: append([]string(nil), ep.cfg.GetMetadataOptions().GetForwardingNamespaces().GetUntyped()...),
	}
	if c := ep.cfg.GetStatusOnError().GetCode(); c != 0 {
		x.StatusOnError = int(c)
	}
	if md := gs.GetInitialMetadata(); len(md) > 0 {
		x.InitialMetadata = make(map[string]string, len(md))
		for _, hv := range md {
			x.InitialMetadata[hv.GetKey()] = headerValue(hv.GetValue(), hv.GetRawValue())
		}
	}
	return x
}

// routesOf reduces the routes of the connection manager's one virtual host,
// each with its CORS policy when a CORS filter runs before ext_proc.
func routesOf(h *hcmv3.HttpConnectionManager, ep extProcFilter) ([]Route, error) {
	corsName, err := corsFilterName(h, ep.index)
	if err != nil {
		return nil, err
	}
	rc, err := staticRoutes(h)
	if err != nil {
		return nil, err
	}
	vhs := rc.GetVirtualHosts()
	if len(vhs) != 1 || len(vhs[0].GetDomains()) != 1 || vhs[0].GetDomains()[0] != "*" {
		return nil, fmt.Errorf("route_config %q: want exactly one virtual host with domains [\"*\"]", rc.GetName())
	}
	vh := vhs[0]
	var routes []Route
	for i, r := range vh.GetRoutes() {
		rt, err := routeSettings(r, ep.name, rc.GetTypedPerFilterConfig(), vh.GetTypedPerFilterConfig())
		if err == nil && corsName != "" {
			rt.CORS, err = corsPolicyOf(r, vh, corsName, r.GetTypedPerFilterConfig(), vh.GetTypedPerFilterConfig(), rc.GetTypedPerFilterConfig())
		}
		if err != nil {
			return nil, fmt.Errorf("virtual host %q routes[%d] %q: %w", vh.GetName(), i, r.GetName(), err)
		}
		routes = append(routes, rt)
	}
	return routes, nil
}

// routeSettings reduces one route; rcPFC and vhPFC are the less specific
// per-filter configs of its route configuration and virtual host.
func routeSettings(r *routev3.Route, extProcName string, rcPFC, vhPFC map[string]*anypb.Any) (Route, error) {
	rt := Route{Name: r.GetName()}
	m := r.GetMatch()
	switch {
	case m.GetPathSpecifier() == nil:
		return rt, errors.New("match has no path specifier")
	case m.GetSafeRegex() != nil || m.GetConnectMatcher() != nil || m.GetPathSeparatedPrefix() != "" || m.GetPathMatchPolicy() != nil:
		return rt, errors.New("only prefix and path matches are supported")
	}
	rt.Prefix, rt.Path = m.GetPrefix(), m.GetPath()
	rt.GRPC = m.GetGrpc() != nil
	switch {
	case m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue():
		return rt, errors.New("case-insensitive matches are not supported")
	case len(m.GetHeaders()) > 0, len(m.GetQueryParameters()) > 0, len(m.GetCookies()) > 0,
		m.GetRuntimeFraction() != nil, m.GetTlsContext() != nil, len(m.GetDynamicMetadata()) > 0, len(m.GetFilterState()) > 0:
		return rt, errors.New("only prefix, path and grpc matchers are supported")
	}

	switch {
	case r.GetRoute() != nil:
		a := r.GetRoute()
		if a.GetCluster() == "" {
			return rt, errors.New("route action must name a single cluster")
		}
		rt.Cluster = a.GetCluster()
		rt.Timeout = durationOr(a.GetTimeout(), defaultRouteTimeout)
		rt.TimeoutSet = a.GetTimeout() != nil
		rt.IdleTimeout = durationOr(a.GetIdleTimeout(), 0)
	case r.GetDirectResponse() != nil:
		d := r.GetDirectResponse()
		rt.DirectResponseStatus = int(d.GetStatus())
		if body := d.GetBody(); body != nil {
			switch {
			case body.GetInlineString() != "":
				rt.DirectResponseBody = body.GetInlineString()
			case body.GetInlineBytes() != nil:
				rt.DirectResponseBody = string(body.GetInlineBytes())
			default:
				return rt, errors.New("direct_response body must be inline_string or inline_bytes")
			}
		}
	default:
		return rt, errors.New("only route (to a cluster) and direct_response actions are supported")
	}

	pr, err := effectivePerRoute(extProcName, rcPFC, vhPFC, r.GetTypedPerFilterConfig())
	if err != nil {
		return rt, err
	}
	if len(pr.overrides) > 0 {
		return rt, fmt.Errorf("ExtProcPerRoute overrides %v are not supported (only grpc_initial_metadata)", pr.overrides)
	}
	rt.ExtProcDisabled = pr.disabled
	if len(pr.metadata) > 0 {
		rt.ExtProcInitialMetadata = make(map[string]string, len(pr.metadata))
		for _, kv := range pr.metadata {
			rt.ExtProcInitialMetadata[kv.key] = kv.value
		}
	}
	return rt, nil
}

// durationOr is d, or def when d is unset.
func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}
