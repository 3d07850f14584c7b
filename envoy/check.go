package envoy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// CheckOptions are the processor limits the Envoy timers must stay above.
type CheckOptions struct {
	// MaxWait is limits.max-wait: how long the processor holds a long poll.
	MaxWait time.Duration
	// ReplyTimeout is limits.reply-timeout: how long it waits for a reply record.
	ReplyTimeout time.Duration
	// SSEHeartbeat is limits.sse-heartbeat: the longest an event stream
	// stays silent (0: not checked).
	SSEHeartbeat time.Duration
	// PingMinTime is the processor gRPC server's keepalive enforcement
	// minimum (stack.KeepaliveMinTime): HTTP/2 PINGs from Envoy closer
	// together end its connections with a too_many_pings GOAWAY. 0 means
	// grpc-go's default of 5 minutes.
	PingMinTime time.Duration
}

// Envoy defaults Check relies on.
const (
	defaultCircuitBreakerLimit = 1024            // cluster circuit breaker max_requests / max_pending_requests
	defaultGRPCPingMinTime     = 5 * time.Minute // grpc-go keepalive.EnforcementPolicy MinTime
	adminReadyPath             = "/ready"
	upstreamHTTPOptionsKey     = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	jwtAuthnNamespace          = "envoy.filters.http.jwt_authn"
)

// Check reports what Envoy checks only in C++ (so Validate cannot see it) and
// what the processor's design needs of the Envoy in front of it: ext_proc in
// the supported processing mode and fail-closed, FULL_DUPLEX_STREAMED with
// trailer SEND, every referenced cluster defined, the processor cluster on
// HTTP/2 with gRPC health checks and circuit breakers above Envoy's default,
// and the idle timers above the processor's own waits. All problems are
// returned, joined; nil means none.
func Check(b *bootstrapv3.Bootstrap, opts CheckOptions) error {
	c := &checker{opts: opts, clusters: map[string]*clusterv3.Cluster{}, extProcClusters: map[string]bool{}}
	if b.GetDynamicResources() != nil {
		c.problem("dynamic_resources are set: the checks need static listeners, routes and clusters")
	}
	for _, cl := range b.GetStaticResources().GetClusters() {
		c.clusters[cl.GetName()] = cl
	}
	ls := b.GetStaticResources().GetListeners()
	if len(ls) == 0 {
		c.problem("no static listener")
	}
	processing := 0
	for _, l := range ls {
		hs, err := hcmsOf(l)
		if err != nil {
			c.problem("%v", err)
			continue
		}
		if len(hs) == 0 {
			c.problem("listener %q has no HTTP connection manager", l.GetName())
		}
		for _, h := range hs {
			if isProbeHCM(h.hcm) {
				c.checkProbeHCM(h.where, h.hcm, b.GetAdmin().GetAddress().GetSocketAddress())
				continue
			}
			processing++
			c.checkHCM(h.where, h.hcm)
		}
	}
	if len(ls) > 0 && processing == 0 {
		c.problem("no listener runs the ext_proc filter")
	}
	for _, name := range slices.Sorted(maps.Keys(c.extProcClusters)) {
		if cl, ok := c.clusters[name]; ok {
			c.checkProcessorCluster(cl)
		}
	}
	if len(c.problems) > 0 {
		return fmt.Errorf("checking Envoy bootstrap: %w", errors.Join(c.problems...))
	}
	return nil
}

type checker struct {
	opts     CheckOptions
	clusters map[string]*clusterv3.Cluster
	// extProcClusters are the clusters named by ext_proc grpc services.
	extProcClusters map[string]bool
	problems        []error
}

func (c *checker) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Errorf(format, args...))
}

// cluster reports a reference to an undefined cluster.
func (c *checker) cluster(where, name string) {
	if _, ok := c.clusters[name]; !ok {
		c.problem("%s: cluster %q is not defined in static_resources.clusters", where, name)
	}
}

// aboveLimits reports a timer that would fire before the processor's own
// waits end; 0 disables an Envoy timer and so is above everything.
func (c *checker) aboveLimits(where, what string, d time.Duration) {
	if d == 0 {
		return
	}
	if d <= c.opts.MaxWait {
		c.problem("%s: %s %s is not above limits.max-wait %s: Envoy would end long polls before the processor answers", where, what, d, c.opts.MaxWait)
	}
	if d <= c.opts.ReplyTimeout {
		c.problem("%s: %s %s is not above limits.reply-timeout %s: Envoy would end requests waiting for a reply before the processor answers", where, what, d, c.opts.ReplyTimeout)
	}
	if d <= c.opts.SSEHeartbeat {
		c.problem("%s: %s %s is not above limits.sse-heartbeat %s: Envoy would end quiet event streams between two heartbeats", where, what, d, c.opts.SSEHeartbeat)
	}
}

func (c *checker) checkHCM(where string, h *hcmv3.HttpConnectionManager) {
	c.aboveLimits(where, "stream_idle_timeout", durationOr(h.GetStreamIdleTimeout(), defaultStreamIdleTimeout))
	// request_timeout stays armed until the response starts, so it would cut
	// a long poll like the idle timer.
	c.aboveLimits(where, "request_timeout", durationOr(h.GetRequestTimeout(), 0))
	if h.GetCodecType() == hcmv3.HttpConnectionManager_HTTP1 {
		c.problem("%s: codec_type HTTP1 refuses gRPC clients; the contract is AUTO", where)
	}
	if len(h.GetUpgradeConfigs()) > 0 {
		c.problem("%s: upgrade_configs are set; Upgrade requests hang with a FULL_DUPLEX_STREAMED ext_proc (envoyproxy/envoy#47081) and the contract refuses them", where)
	}

	extProcName := c.checkFilterChain(where, h)

	rc, err := staticRoutes(h)
	if err != nil {
		c.problem("%s: %v", where, err)
		return
	}
	rcWhere := fmt.Sprintf("%s route_config %q", where, rc.GetName())
	c.checkPerRouteConfigs(rcWhere, extProcName, rc.GetTypedPerFilterConfig())
	for _, vh := range rc.GetVirtualHosts() {
		vhWhere := fmt.Sprintf("%s virtual host %q", rcWhere, vh.GetName())
		c.checkPerRouteConfigs(vhWhere, extProcName, vh.GetTypedPerFilterConfig())
		for i, r := range vh.GetRoutes() {
			rWhere := fmt.Sprintf("%s routes[%d] %q", vhWhere, i, r.GetName())
			c.checkPerRouteConfigs(rWhere, extProcName, r.GetTypedPerFilterConfig())
			c.checkRoute(rWhere, r)
		}
	}
}

// checkFilterChain checks the HTTP filter chain is [jwt_authn (optional),
// ext_proc, router] and each filter's config; it returns the ext_proc
// filter's name (the key of its per-route configs), "" if there is none.
func (c *checker) checkFilterChain(where string, h *hcmv3.HttpConnectionManager) string {
	eps, err := extProcFiltersOf(h)
	if err != nil {
		c.problem("%s: %v", where, err)
		return ""
	}
	if len(eps) != 1 {
		c.problem("%s: %d ext_proc filters, want exactly 1", where, len(eps))
	}
	var extProcName string
	extProcAt := -1
	if len(eps) > 0 {
		extProcName, extProcAt = eps[0].name, eps[0].index
	}
	fs := h.GetHttpFilters()
	jwtAt := -1
	for i, f := range fs {
		fWhere := fmt.Sprintf("%s http_filters[%d] %q", where, i, f.GetName())
		switch t := f.GetTypedConfig().GetTypeUrl(); t {
		case extProcType:
		case routerType:
			// Envoy refuses a chain whose terminal router is not last (C++ check).
			if i != len(fs)-1 {
				c.problem("%s: the router must be the last HTTP filter", fWhere)
			}
		case jwtAuthnType:
			jwtAt = i
			c.checkJWT(fWhere, f.GetTypedConfig())
		case corsType:
			// Envoy answers CORS preflights itself only when the filter
			// runs before ext_proc, which answers every request it sees.
			if extProcAt >= 0 && i > extProcAt {
				c.problem("%s: the CORS filter must come before ext_proc, which answers every request it sees", fWhere)
			}
		default:
			c.problem("%s: filter type %s is not part of the contract [cors (optional), jwt_authn (optional), ext_proc, router]", fWhere, t)
		}
		if f.GetDisabled() {
			c.problem("%s: disabled filters are not supported", fWhere)
		}
	}
	if len(fs) == 0 || fs[len(fs)-1].GetTypedConfig().GetTypeUrl() != routerType {
		c.problem("%s: the last HTTP filter must be envoy.filters.http.router", where)
	}
	if jwtAt > extProcAt && extProcAt >= 0 {
		c.problem("%s: jwt_authn must come before ext_proc, which forwards its metadata", where)
	}
	for _, ep := range eps {
		c.checkExtProc(fmt.Sprintf("%s http_filters[%d] %q", where, ep.index, ep.name), ep.cfg, jwtAt >= 0)
	}
	return extProcName
}

func (c *checker) checkExtProc(where string, cfg *extprocv3.ExternalProcessor, hasJWT bool) {
	switch gs := cfg.GetGrpcService(); {
	case gs == nil:
		c.problem("%s: no grpc_service (http_service cannot stream bodies); the processor is a gRPC service", where)
	case gs.GetEnvoyGrpc() == nil:
		c.problem("%s: grpc_service must use envoy_grpc (a cluster with HTTP/2, health checks and circuit breakers)", where)
	default:
		c.cluster(where+" grpc_service", gs.GetEnvoyGrpc().GetClusterName())
		c.extProcClusters[gs.GetEnvoyGrpc().GetClusterName()] = true
	}
	c.checkMode(where+" processing_mode", cfg.GetProcessingMode())
	if cfg.GetFailureModeAllow() {
		c.problem("%s: failure_mode_allow is true; it must be false (fail-open only reaches the placeholder routes)", where)
	}
	if cfg.GetObservabilityMode() {
		c.problem("%s: observability_mode is true; Envoy then ignores every answer of the processor", where)
	}
	if cfg.GetDisableImmediateResponse() {
		c.problem("%s: disable_immediate_response is true; the processor answers with ImmediateResponse", where)
	}
	if hasJWT && !slices.Contains(cfg.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(), jwtAuthnNamespace) {
		c.problem("%s: metadata_options.forwarding_namespaces.untyped lacks %s, so the processor cannot see the verified JWT", where, jwtAuthnNamespace)
	}
}

// checkMode compares a processing mode with the supported one, field by field.
func (c *checker) checkMode(where string, pm *extprocv3.ProcessingMode) {
	got := effectiveMode(pm)
	// Envoy's own rule, checked in C++ (ext_proc config.cc) for both directions.
	fdsNeedsSend := map[string]bool{}
	if pm.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
		c.problem("%s: request_body_mode FULL_DUPLEX_STREAMED requires request_trailer_mode SEND (got %s); Envoy rejects the filter otherwise", where, got["request_trailer_mode"])
		fdsNeedsSend["request_trailer_mode"] = true
	}
	if pm.GetResponseBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		c.problem("%s: response_body_mode FULL_DUPLEX_STREAMED requires response_trailer_mode SEND (got %s); Envoy rejects the filter otherwise", where, got["response_trailer_mode"])
		fdsNeedsSend["response_trailer_mode"] = true
	}
	// The only mode the processor implements
	// (docs/design.md#the-envoy-contract): it answers request headers locally,
	// takes the body as full-duplex chunks and never sees the response.
	supported := []struct{ field, want string }{
		{"request_header_mode", "SEND"},
		{"request_body_mode", "FULL_DUPLEX_STREAMED"},
		{"request_trailer_mode", "SEND"},
		{"response_header_mode", "SKIP"},
		{"response_body_mode", "NONE"},
		{"response_trailer_mode", "SKIP"},
	}
	for _, m := range supported {
		if got[m.field] != m.want && !fdsNeedsSend[m.field] {
			c.problem("%s: %s is %s; the processor supports only %s", where, m.field, got[m.field], m.want)
		}
	}
}

// effectiveMode names each mode as Envoy applies it: DEFAULT header modes
// mean SEND and DEFAULT trailer modes SKIP (processing_mode.proto).
func effectiveMode(pm *extprocv3.ProcessingMode) map[string]string {
	hdr := func(m extprocv3.ProcessingMode_HeaderSendMode, def string) string {
		if m == extprocv3.ProcessingMode_DEFAULT {
			return "DEFAULT (= " + def + ")"
		}
		return m.String()
	}
	return map[string]string{
		"request_header_mode":   hdr(pm.GetRequestHeaderMode(), "SEND"),
		"request_body_mode":     pm.GetRequestBodyMode().String(),
		"request_trailer_mode":  hdr(pm.GetRequestTrailerMode(), "SKIP"),
		"response_header_mode":  hdr(pm.GetResponseHeaderMode(), "SEND"),
		"response_body_mode":    pm.GetResponseBodyMode().String(),
		"response_trailer_mode": hdr(pm.GetResponseTrailerMode(), "SKIP"),
	}
}

// checkPerRouteConfigs checks one level's ExtProcPerRoute: overrides must not
// change the processing mode, fail open, or name an undefined cluster.
func (c *checker) checkPerRouteConfigs(where, extProcName string, pfc map[string]*anypb.Any) {
	a, ok := pfc[extProcName]
	if !ok || extProcName == "" {
		return
	}
	where = fmt.Sprintf("%s typed_per_filter_config %q", where, extProcName)
	if a.GetTypeUrl() == filterCfgType {
		fc := &routev3.FilterConfig{}
		if err := unpack(a, fc); err != nil {
			c.problem("%s: %v", where, err)
			return
		}
		if a = fc.GetConfig(); a == nil {
			return
		}
	}
	pr := &extprocv3.ExtProcPerRoute{}
	if err := unpack(a, pr); err != nil {
		c.problem("%s: %v", where, err)
		return
	}
	o := pr.GetOverrides()
	if pm := o.GetProcessingMode(); pm != nil {
		c.checkMode(where+" overrides.processing_mode", pm)
	}
	if o.GetFailureModeAllow().GetValue() {
		c.problem("%s: overrides.failure_mode_allow is true; it must be false", where)
	}
	if gs := o.GetGrpcService(); gs != nil {
		if gs.GetEnvoyGrpc() == nil {
			c.problem("%s: overrides.grpc_service must use envoy_grpc", where)
		} else {
			c.cluster(where+" overrides.grpc_service", gs.GetEnvoyGrpc().GetClusterName())
			c.extProcClusters[gs.GetEnvoyGrpc().GetClusterName()] = true
		}
	}
}

func (c *checker) checkRoute(where string, r *routev3.Route) {
	a := r.GetRoute()
	if a == nil {
		return
	}
	switch {
	case a.GetCluster() != "":
		c.cluster(where, a.GetCluster())
	case a.GetWeightedClusters() != nil:
		for _, wc := range a.GetWeightedClusters().GetClusters() {
			c.cluster(where+" weighted_clusters", wc.GetName())
		}
	default:
		c.problem("%s: the route's cluster is chosen at request time (cluster_header or a plugin) and cannot be checked; name a cluster", where)
	}
	// A route's idle_timeout replaces stream_idle_timeout for its requests
	// (when unset, the HCM's applies and is checked with it): the gRPC route's
	// must outlast quiet fetch streams and long polls.
	if it := a.GetIdleTimeout(); it != nil {
		c.aboveLimits(where, "idle_timeout", it.AsDuration())
	}
}

// checkProcessorCluster checks what the processor's cluster needs: HTTP/2 for
// gRPC, gRPC health checking (draining relies on NOT_SERVING), and circuit
// breakers above Envoy's default of 1024, since every in-flight request (and
// every long poll and fetch stream) holds one ext_proc stream.
func (c *checker) checkProcessorCluster(cl *clusterv3.Cluster) {
	where := fmt.Sprintf("cluster %q (ext_proc)", cl.GetName())
	if !usesHTTP2(cl) {
		c.problem("%s: does not use HTTP/2 (typed_extension_protocol_options %s explicit_http_config.http2_protocol_options); gRPC needs it", where, upstreamHTTPOptionsKey)
	}
	grpcHC := false
	for _, hc := range cl.GetHealthChecks() {
		if hc.GetGrpcHealthCheck() != nil {
			grpcHC = true
		}
	}
	if !grpcHC {
		c.problem("%s: no grpc_health_check (grpc.health.v1); Envoy would keep sending streams to a draining processor", where)
	}
	c.checkKeepalive(where, cl)
	var def *clusterv3.CircuitBreakers_Thresholds
	for _, t := range cl.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() == corev3.RoutingPriority_DEFAULT {
			def = t
		}
	}
	limit := func(name string, v interface{ GetValue() uint32 }, set bool) {
		n := uint32(defaultCircuitBreakerLimit)
		if set {
			n = v.GetValue()
		}
		if n <= defaultCircuitBreakerLimit {
			c.problem("%s: circuit_breakers DEFAULT %s is %d; it must be far above %d (one ext_proc stream per in-flight request)", where, name, n, defaultCircuitBreakerLimit)
		}
	}
	limit("max_requests", def.GetMaxRequests(), def.GetMaxRequests() != nil)
	limit("max_pending_requests", def.GetMaxPendingRequests(), def.GetMaxPendingRequests() != nil)
}

// usesHTTP2 reports whether the cluster speaks HTTP/2 upstream.
func usesHTTP2(cl *clusterv3.Cluster) bool {
	return http2Options(cl) != nil
}

// http2Options are the cluster's upstream HTTP/2 options, nil without them.
func http2Options(cl *clusterv3.Cluster) *corev3.Http2ProtocolOptions {
	a, ok := cl.GetTypedExtensionProtocolOptions()[upstreamHTTPOptionsKey]
	if !ok {
		return nil
	}
	o := &upstreamhttpv3.HttpProtocolOptions{}
	if err := unpack(a, o); err != nil {
		return nil
	}
	if h := o.GetExplicitHttpConfig().GetHttp2ProtocolOptions(); h != nil {
		return h
	}
	return o.GetAutoConfig().GetHttp2ProtocolOptions()
}

// checkKeepalive compares the PINGs Envoy sends the processor with what its
// gRPC server permits: closer than the enforcement minimum, grpc-go counts
// each as a strike and ends the connection (and every ext_proc stream on it)
// with a too_many_pings GOAWAY. Envoy's interval_jitter only adds to the
// interval, so the interval itself is the shortest gap.
func (c *checker) checkKeepalive(where string, cl *clusterv3.Cluster) {
	ka := http2Options(cl).GetConnectionKeepalive()
	if ka.GetInterval() == nil {
		return
	}
	minTime := c.opts.PingMinTime
	if minTime == 0 {
		minTime = defaultGRPCPingMinTime
	}
	if iv := ka.GetInterval().AsDuration(); iv < minTime {
		c.problem("%s: http2_protocol_options.connection_keepalive.interval %s is below the processor's keepalive enforcement minimum %s: its gRPC server would end the connection with a too_many_pings GOAWAY", where, iv, minTime)
	}
}

// isProbeHCM reports whether an HCM has no ext_proc filter and only the
// router: the shape of a listener for probes of Envoy itself.
func isProbeHCM(h *hcmv3.HttpConnectionManager) bool {
	fs := h.GetHttpFilters()
	return len(fs) == 1 && fs[0].GetTypedConfig().GetTypeUrl() == routerType
}

// checkProbeHCM checks a listener without ext_proc reaches nothing but the
// admin interface's read-only /ready for GET: anything more would bypass the
// processor, or expose the admin interface, which can change Envoy's state.
func (c *checker) checkProbeHCM(where string, h *hcmv3.HttpConnectionManager, admin *corev3.SocketAddress) {
	rc, err := staticRoutes(h)
	if err != nil {
		c.problem("%s: %v", where, err)
		return
	}
	for _, vh := range rc.GetVirtualHosts() {
		for i, r := range vh.GetRoutes() {
			rWhere := fmt.Sprintf("%s (no ext_proc) virtual host %q routes[%d] %q", where, vh.GetName(), i, r.GetName())
			if r.GetDirectResponse() != nil {
				continue
			}
			name := r.GetRoute().GetCluster()
			if name == "" || !c.isAdminCluster(name, admin) {
				c.problem("%s: a listener without ext_proc may only answer directly or route to a cluster of the admin address", rWhere)
				continue
			}
			if r.GetMatch().GetPath() != adminReadyPath || !matchesGETOnly(r.GetMatch()) {
				c.problem("%s: only an exact path %s with :method GET may reach the admin interface", rWhere, adminReadyPath)
			}
		}
	}
}

// isAdminCluster reports whether every endpoint of a defined cluster is the
// admin interface's address.
func (c *checker) isAdminCluster(name string, admin *corev3.SocketAddress) bool {
	cl, ok := c.clusters[name]
	if !ok || admin == nil {
		return false
	}
	n := 0
	for _, le := range cl.GetLoadAssignment().GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetAddress() != admin.GetAddress() || sa.GetPortValue() != admin.GetPortValue() {
				return false
			}
			n++
		}
	}
	return n > 0
}

// matchesGETOnly reports whether a route match requires :method GET exactly.
func matchesGETOnly(m *routev3.RouteMatch) bool {
	for _, hm := range m.GetHeaders() {
		if hm.GetName() == ":method" && !hm.GetInvertMatch() && hm.GetStringMatch().GetExact() == "GET" {
			return true
		}
	}
	return false
}

// checkJWT checks that every remote JWKS names a defined cluster.
func (c *checker) checkJWT(where string, a *anypb.Any) {
	j := &jwtv3.JwtAuthentication{}
	if err := unpack(a, j); err != nil {
		c.problem("%s: %v", where, err)
		return
	}
	for _, name := range slices.Sorted(maps.Keys(j.GetProviders())) {
		if u := j.GetProviders()[name].GetRemoteJwks().GetHttpUri(); u != nil {
			c.cluster(fmt.Sprintf("%s provider %q remote_jwks", where, name), u.GetCluster())
		}
	}
}
