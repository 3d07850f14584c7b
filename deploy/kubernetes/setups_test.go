package kubernetes

import (
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	istioapi "istio.io/api/networking/v1alpha3"
	istionetv1 "istio.io/client-go/pkg/apis/networking/v1"
	istionetv1a3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// envoyFloor is the oldest Envoy the processor works with
// (StreamedImmediateResponse, and the fix for CVE-2026-47207).
var envoyFloor = []int{1, 37, 5}

// checkEnvoyImage requires envoyproxy/envoy at or above the floor, pinned by
// digest.
func checkEnvoyImage(image string) error {
	ref, digest, ok := strings.Cut(image, "@sha256:")
	if !ok || len(digest) != 64 {
		return fmt.Errorf("envoy image %q is not pinned by digest", image)
	}
	tag, ok := strings.CutPrefix(ref, "envoyproxy/envoy:v")
	if !ok {
		return fmt.Errorf("envoy image %q is not envoyproxy/envoy:vX.Y.Z", image)
	}
	var v []int
	for _, f := range strings.Split(tag, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("envoy image %q: version %q: %w", image, tag, err)
		}
		v = append(v, n)
	}
	if slices.Compare(v, envoyFloor) < 0 {
		return fmt.Errorf("envoy image %q is below Envoy 1.37.5", image)
	}
	return nil
}

// checkBootstrap runs what `kafka-ext-proc validate --envoy` runs.
func checkBootstrap(b *bootstrapv3.Bootstrap, r *rendered) error {
	if err := envoy.Validate(b); err != nil {
		return err
	}
	return envoy.Check(b, r.checkOptions())
}

// processorEndpoints are the addresses of the ext_proc filter's cluster.
func processorEndpoints(b *bootstrapv3.Bootstrap, clusterName string) []string {
	var out []string
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() != clusterName {
			continue
		}
		for _, le := range cl.GetLoadAssignment().GetEndpoints() {
			for _, ep := range le.GetLbEndpoints() {
				sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
			}
		}
	}
	return out
}

func extProcCluster(b *bootstrapv3.Bootstrap) (string, error) {
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				h := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(h) != nil {
					continue
				}
				for _, hf := range h.GetHttpFilters() {
					ep := &extprocv3.ExternalProcessor{}
					if hf.GetTypedConfig().UnmarshalTo(ep) == nil {
						return ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(), nil
					}
				}
			}
		}
	}
	return "", errors.New("no ext_proc filter")
}

// checkEndpoint requires the ext_proc cluster to reach the chart's Service.
func checkEndpoint(b *bootstrapv3.Bootstrap, r *rendered, fqdn bool) error {
	name, err := extProcCluster(b)
	if err != nil {
		return err
	}
	host, port := r.grpcAddress(fqdn)
	want := net.JoinHostPort(host, strconv.Itoa(int(port)))
	if got := processorEndpoints(b, name); !slices.Equal(got, []string{want}) {
		return fmt.Errorf("ext_proc cluster %q endpoints %v, want the chart's Service %s", name, got, want)
	}
	return nil
}

// pathPrefixes are the literal starts of the configuration's HTTP route
// paths ("" for a route matching any path), and whether it has gRPC
// bindings: what a mesh's routes must let into the filter chain.
func pathPrefixes(cfg *config.Config) (prefixes []string, grpc bool) {
	for _, b := range cfg.Bindings {
		if b.Type == config.GRPCKafka {
			grpc = true
			continue
		}
		for _, rt := range b.Routes {
			if len(rt.When) == 0 {
				prefixes = append(prefixes, "")
			}
			for _, w := range rt.When {
				p := ""
				if w.Path != nil {
					p, _, _ = strings.Cut(w.Path.Raw, "{")
				}
				prefixes = append(prefixes, p)
			}
		}
	}
	return prefixes, grpc
}

// checkCoverage requires every configured path to match one of the mesh's
// route prefixes, and gRPC bindings a content-type route.
func checkCoverage(cfg *config.Config, routePrefixes []string, grpcRoute bool) error {
	var errs []error
	paths, grpc := pathPrefixes(cfg)
	for _, p := range paths {
		if !slices.ContainsFunc(routePrefixes, func(rp string) bool { return strings.HasPrefix(p, rp) }) {
			errs = append(errs, fmt.Errorf("configured path %q matches none of the route prefixes %v: Envoy would not run the filter chain for it", p+"…", routePrefixes))
		}
	}
	if grpc && !grpcRoute {
		errs = append(errs, errors.New("the configuration has gRPC bindings and no route matches content-type application/grpc"))
	}
	return errors.Join(errs...)
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// bootstrapOf is a one-listener bootstrap around an HCM, with the clusters.
func bootstrapOf(name string, port uint32, h *hcmv3.HttpConnectionManager, clusters ...*clusterv3.Cluster) *bootstrapv3.Bootstrap {
	return &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{
		Listeners: []*listenerv3.Listener{{
			Name:    name,
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}},
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(h)},
			}}}},
		}},
		Clusters: clusters,
	}}
}

func loadAssignment(cluster, host string, port uint32) *endpointv3.ClusterLoadAssignment {
	addr := &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
	ep := &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}
	return &endpointv3.ClusterLoadAssignment{ClusterName: cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{ep}}}}
}

func http2Options() *upstreamhttpv3.HttpProtocolOptions {
	return &upstreamhttpv3.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		},
	}}
}

func routerFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}}
}

func directResponse(status uint32, body string) *routev3.Route_DirectResponse {
	dr := &routev3.DirectResponseAction{Status: status}
	if body != "" {
		dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: body}}
	}
	return &routev3.Route_DirectResponse{DirectResponse: dr}
}

// ---- standalone ----

// checkStandalone checks the standalone Envoy manifests against the file
// its ConfigMap is made of (envoy/envoy.yaml) and the chart's release.
func checkStandalone(manifests, envoyYAML []byte, configMapFile string, r *rendered) error {
	objs, err := decodeAll(manifests)
	if err != nil {
		return err
	}
	dep, err := only[*appsv1.Deployment](objs)
	if err != nil {
		return err
	}
	svc, err := only[*corev1.Service](objs)
	if err != nil {
		return err
	}
	b, err := envoy.Parse(envoyYAML)
	if err != nil {
		return err
	}
	var errs []error
	problem := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := checkBootstrap(b, r); err != nil {
		errs = append(errs, err)
	}
	// In the processor's namespace the Service's short name resolves.
	if err := checkEndpoint(b, r, false); err != nil {
		errs = append(errs, err)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return fmt.Errorf("envoy deployment has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if err := checkEnvoyImage(c.Image); err != nil {
		errs = append(errs, err)
	}
	// -c names the ConfigMap's key where it is mounted.
	i := slices.Index(c.Args, "-c")
	if i < 0 || i+1 >= len(c.Args) {
		return errors.Join(append(errs, fmt.Errorf("envoy args %q have no -c", c.Args))...)
	}
	cfgPath := c.Args[i+1]
	found := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			for _, it := range v.ConfigMap.Items {
				if it.Key == configMapFile && path.Join(m.MountPath, it.Path) == cfgPath {
					found = true
				}
			}
		}
	}
	if !found {
		problem("envoy -c %s is not the ConfigMap key %s mounted", cfgPath, configMapFile)
	}
	// Container ports: every listener's; probes on the listener that answers /ready.
	ports := map[string]int32{}
	var containerPorts []uint32
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
		containerPorts = append(containerPorts, uint32(p.ContainerPort))
	}
	listeners := map[uint32]*listenerv3.Listener{}
	for _, l := range b.GetStaticResources().GetListeners() {
		port := l.GetAddress().GetSocketAddress().GetPortValue()
		listeners[port] = l
		if !slices.Contains(containerPorts, port) {
			problem("envoy listener %q port %d is not a container port", l.GetName(), port)
		}
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" {
			problem("envoy startup and readiness probes must GET /ready")
			continue
		}
		l := listeners[uint32(ports[p.HTTPGet.Port.String()])]
		if l == nil || !answersReady(l) {
			problem("envoy probe port %q is not a listener that routes GET /ready to the admin interface", p.HTTPGet.Port.String())
		}
	}
	first := b.GetStaticResources().GetListeners()[0].GetAddress().GetSocketAddress().GetPortValue()
	if len(svc.Spec.Ports) == 0 || uint32(ports[svc.Spec.Ports[0].TargetPort.String()]) != first {
		problem("envoy Service does not target the ingress listener's port %d", first)
	}
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		problem("envoy Service externalTrafficPolicy %q: envoy.yaml uses the peer address (use_remote_address); Local keeps the client's", svc.Spec.ExternalTrafficPolicy)
	}
	return errors.Join(errs...)
}

// answersReady reports whether a listener routes GET /ready somewhere (Check
// has made sure such a route can only reach the admin interface).
func answersReady(l *listenerv3.Listener) bool {
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			h := &hcmv3.HttpConnectionManager{}
			if f.GetTypedConfig().UnmarshalTo(h) != nil {
				continue
			}
			for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
				for _, rt := range vh.GetRoutes() {
					if rt.GetMatch().GetPath() == "/ready" && rt.GetRoute() != nil {
						return true
					}
				}
			}
		}
	}
	return false
}

// ---- Istio ----

// istioBootstrap assembles what the EnvoyFilter patches and the
// VirtualService make of the ingress gateway's port-8080 listener: a
// connection manager with the inserted filters before the router, MERGE
// patches merged into it (proto.Merge, as Istio merges), the added clusters
// and the VirtualService's routes. Istio's own clusters and settings are
// not modelled; the patches must carry everything the checks need.
func istioBootstrap(ef *istionetv1a3.EnvoyFilter, gw *istionetv1.Gateway, vs *istionetv1.VirtualService) (*bootstrapv3.Bootstrap, []string, bool, error) {
	var errs []error
	problem := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// The default ingress gateway listens on 8080 for the Gateway's port 80.
	const gatewayPort, podPort = 80, 8080
	if len(gw.Spec.GetServers()) != 1 || gw.Spec.GetServers()[0].GetPort().GetNumber() != gatewayPort {
		problem("the Gateway must have one server on port %d (the ingress gateway's pod port %d)", gatewayPort, podPort)
	}
	if !slices.Contains(vs.Spec.GetGateways(), gw.Name) {
		problem("the VirtualService is not bound to Gateway %q", gw.Name)
	}
	h := &hcmv3.HttpConnectionManager{StatPrefix: "gateway", CodecType: hcmv3.HttpConnectionManager_AUTO}
	var inserted []*hcmv3.HttpFilter
	var merges []*hcmv3.HttpConnectionManager
	var clusters []*clusterv3.Cluster
	for i, p := range ef.Spec.GetConfigPatches() {
		where := fmt.Sprintf("EnvoyFilter %q configPatches[%d] %s", ef.Name, i, p.GetApplyTo())
		if p.GetMatch().GetContext() != istioapi.EnvoyFilter_GATEWAY {
			problem("%s: context %s, want GATEWAY", where, p.GetMatch().GetContext())
		}
		js, err := protojson.Marshal(p.GetPatch().GetValue())
		if err != nil {
			return nil, nil, false, err
		}
		op := p.GetPatch().GetOperation()
		lm := p.GetMatch().GetListener()
		switch p.GetApplyTo() {
		case istioapi.EnvoyFilter_CLUSTER:
			cl := &clusterv3.Cluster{}
			if err := protojson.Unmarshal(js, cl); err != nil {
				problem("%s: %v", where, err)
				continue
			}
			if op != istioapi.EnvoyFilter_Patch_ADD {
				problem("%s: operation %s, want ADD", where, op)
			}
			clusters = append(clusters, cl)
		case istioapi.EnvoyFilter_NETWORK_FILTER:
			f := &listenerv3.Filter{}
			hm := &hcmv3.HttpConnectionManager{}
			if err := protojson.Unmarshal(js, f); err != nil {
				problem("%s: %v", where, err)
				continue
			}
			if err := f.GetTypedConfig().UnmarshalTo(hm); err != nil {
				problem("%s: %v", where, err)
				continue
			}
			if op != istioapi.EnvoyFilter_Patch_MERGE || lm.GetPortNumber() != podPort || lm.GetFilterChain().GetFilter().GetName() != "envoy.filters.network.http_connection_manager" {
				problem("%s: want a MERGE into the HTTP connection manager of port %d", where, podPort)
			}
			merges = append(merges, hm)
		case istioapi.EnvoyFilter_HTTP_FILTER:
			f := &hcmv3.HttpFilter{}
			if err := protojson.Unmarshal(js, f); err != nil {
				problem("%s: %v", where, err)
				continue
			}
			if op != istioapi.EnvoyFilter_Patch_INSERT_BEFORE || lm.GetPortNumber() != podPort || lm.GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
				problem("%s: want INSERT_BEFORE envoy.filters.http.router on port %d", where, podPort)
			}
			inserted = append(inserted, f)
		default:
			problem("%s: not modelled by this check", where)
		}
	}
	h.HttpFilters = append(inserted, routerFilter())
	for _, m := range merges {
		proto.Merge(h, m)
	}

	var prefixes []string
	grpcRoute := false
	vh := &routev3.VirtualHost{Name: "gateway", Domains: []string{"*"}}
	for _, hr := range vs.Spec.GetHttp() {
		dr := hr.GetDirectResponse()
		if dr == nil || len(hr.GetRoute()) > 0 {
			problem("VirtualService route %q forwards: the processor answers every request, so routes answer 504 directly (a forwarding route would pass a request the processor let through to a backend)", hr.GetName())
			continue
		}
		for _, m := range hr.GetMatch() {
			rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
			if u := m.GetUri(); u != nil {
				if u.GetPrefix() == "" {
					problem("VirtualService route %q: only uri prefix matches are modelled", hr.GetName())
					continue
				}
				rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.GetPrefix()}
				prefixes = append(prefixes, u.GetPrefix())
			}
			for name, sm := range m.GetHeaders() {
				if name == "content-type" && strings.HasPrefix("application/grpc", sm.GetPrefix()) && sm.GetPrefix() != "" {
					grpcRoute = true
				}
				rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: sm.GetPrefix()}}}})
			}
			vh.Routes = append(vh.Routes, &routev3.Route{Name: hr.GetName(), Match: rm, Action: directResponse(dr.GetStatus(), dr.GetBody().GetString_())})
		}
	}
	h.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: "gateway", VirtualHosts: []*routev3.VirtualHost{vh}}}
	return bootstrapOf("gateway-8080", podPort, h, clusters...), prefixes, grpcRoute, errors.Join(errs...)
}

func checkIstio(manifests []byte, r *rendered) error {
	objs, err := decodeAll(manifests)
	if err != nil {
		return err
	}
	ef, err := only[*istionetv1a3.EnvoyFilter](objs)
	if err != nil {
		return err
	}
	gw, err := only[*istionetv1.Gateway](objs)
	if err != nil {
		return err
	}
	vs, err := only[*istionetv1.VirtualService](objs)
	if err != nil {
		return err
	}
	b, prefixes, grpcRoute, err := istioBootstrap(ef, gw, vs)
	errs := []error{err}
	if err := checkBootstrap(b, r); err != nil {
		errs = append(errs, err)
	}
	// The gateway is in another namespace: the full name.
	if err := checkEndpoint(b, r, true); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkCoverage(r.cfg, prefixes, grpcRoute))
	return errors.Join(errs...)
}

// ---- Envoy Gateway ----

// egProcessingMode is Envoy Gateway v1.9's translation of an ExtProc's
// processingMode (internal/xds/translator/extproc.go, buildProcessingMode):
// everything SKIP/NONE; a present request or response sends its headers; a
// body mode sets the body, and FullDuplexStreamed sends that side's
// trailers too.
func egProcessingMode(m *egv1a1.ExtProcProcessingMode) *extprocv3.ProcessingMode {
	pm := &extprocv3.ProcessingMode{
		RequestHeaderMode: extprocv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocv3.ProcessingMode_SKIP,
		RequestBodyMode: extprocv3.ProcessingMode_NONE, ResponseBodyMode: extprocv3.ProcessingMode_NONE,
		RequestTrailerMode: extprocv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
	body := func(b *egv1a1.ExtProcBodyProcessingMode) extprocv3.ProcessingMode_BodySendMode {
		if b == nil {
			return extprocv3.ProcessingMode_NONE
		}
		return map[egv1a1.ExtProcBodyProcessingMode]extprocv3.ProcessingMode_BodySendMode{
			egv1a1.BufferedExtProcBodyProcessingMode:          extprocv3.ProcessingMode_BUFFERED,
			egv1a1.BufferedPartialExtBodyHeaderProcessingMode: extprocv3.ProcessingMode_BUFFERED_PARTIAL,
			egv1a1.StreamedExtProcBodyProcessingMode:          extprocv3.ProcessingMode_STREAMED,
			egv1a1.FullDuplexStreamedExtBodyProcessingMode:    extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		}[*b]
	}
	if m == nil {
		return pm
	}
	if m.Request != nil {
		pm.RequestHeaderMode = extprocv3.ProcessingMode_SEND
		if pm.RequestBodyMode = body(m.Request.Body); pm.RequestBodyMode == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			pm.RequestTrailerMode = extprocv3.ProcessingMode_SEND
		}
	}
	if m.Response != nil {
		pm.ResponseHeaderMode = extprocv3.ProcessingMode_SEND
		if pm.ResponseBodyMode = body(m.Response.Body); pm.ResponseBodyMode == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			pm.ResponseTrailerMode = extprocv3.ProcessingMode_SEND
		}
	}
	return pm
}

func duration(d *gwv1.Duration) (*durationpb.Duration, error) {
	if d == nil {
		return nil, nil
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil {
		return nil, err
	}
	return durationpb.New(v), nil
}

// egBootstrap is the Envoy configuration the Envoy Gateway resources make for
// the processor, as far as the checks read it: the ext_proc filter
// (egProcessingMode, failOpen, shadowMode, statusOnError, metadata), its
// cluster from backendSettings (HTTP/2 when the Service port's appProtocol
// is kubernetes.io/h2c, gRPC health checks, circuit breakers), the client
// traffic policy's stream idle timeout and the HTTPRoute's direct responses.
func egBootstrap(eep *egv1a1.EnvoyExtensionPolicy, ctp *egv1a1.ClientTrafficPolicy, route *gwv1.HTTPRoute, filters []*egv1a1.HTTPRouteFilter, svc *corev1.Service) (*bootstrapv3.Bootstrap, []string, bool, error) {
	var errs []error
	problem := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(eep.Spec.ExtProc) != 1 {
		return nil, nil, false, fmt.Errorf("EnvoyExtensionPolicy %q has %d extProc entries, want 1", eep.Name, len(eep.Spec.ExtProc))
	}
	ep := eep.Spec.ExtProc[0]
	const clusterName = "extproc/kafka-ext-proc"
	cfg := &extprocv3.ExternalProcessor{
		GrpcService:       &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: clusterName}}},
		ProcessingMode:    egProcessingMode(ep.ProcessingMode),
		FailureModeAllow:  ep.FailOpen != nil && *ep.FailOpen,
		ObservabilityMode: ep.ShadowMode != nil && *ep.ShadowMode,
	}
	if ep.StatusOnError != nil {
		cfg.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode(*ep.StatusOnError)}
	}
	if ep.Metadata != nil && len(ep.Metadata.AccessibleNamespaces) > 0 {
		cfg.MetadataOptions = &extprocv3.MetadataOptions{ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: ep.Metadata.AccessibleNamespaces}}
	}

	// The backend: the chart's Service, its gRPC port.
	cl := &clusterv3.Cluster{Name: clusterName, ConnectTimeout: durationpb.New(10 * time.Second)}
	if len(ep.BackendRefs) != 1 {
		problem("extProc has %d backendRefs, want the chart's Service", len(ep.BackendRefs))
	} else {
		br := ep.BackendRefs[0].BackendObjectReference
		var sp *corev1.ServicePort
		for i := range svc.Spec.Ports {
			if br.Port != nil && svc.Spec.Ports[i].Port == int32(*br.Port) {
				sp = &svc.Spec.Ports[i]
			}
		}
		switch {
		case string(br.Name) != svc.Name || (br.Namespace != nil && string(*br.Namespace) != namespace):
			problem("extProc backendRef %s is not the chart's Service %s/%s", br.Name, namespace, svc.Name)
		case sp == nil || sp.Name != "grpc":
			problem("extProc backendRef port %v is not the Service's grpc port", br.Port)
		default:
			cl.LoadAssignment = loadAssignment(clusterName, fmt.Sprintf("%s.%s.svc.cluster.local", svc.Name, namespace), uint32(sp.Port))
			if sp.AppProtocol != nil && *sp.AppProtocol == "kubernetes.io/h2c" {
				cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(http2Options())}
			}
		}
	}
	if bs := ep.BackendSettings; bs != nil {
		if bs.HealthCheck != nil && bs.HealthCheck.Active != nil {
			a := bs.HealthCheck.Active
			hc := &corev3.HealthCheck{}
			var err error
			if hc.Timeout, err = duration(a.Timeout); err != nil {
				problem("healthCheck timeout: %v", err)
			}
			if hc.Interval, err = duration(a.Interval); err != nil {
				problem("healthCheck interval: %v", err)
			}
			if a.UnhealthyThreshold != nil {
				hc.UnhealthyThreshold = wrapperspb.UInt32(*a.UnhealthyThreshold)
			}
			if a.HealthyThreshold != nil {
				hc.HealthyThreshold = wrapperspb.UInt32(*a.HealthyThreshold)
			}
			switch a.Type {
			case egv1a1.ActiveHealthCheckerTypeGRPC:
				hc.HealthChecker = &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}}
			case egv1a1.ActiveHealthCheckerTypeTCP:
				hc.HealthChecker = &corev3.HealthCheck_TcpHealthCheck_{TcpHealthCheck: &corev3.HealthCheck_TcpHealthCheck{}}
			default:
				hc.HealthChecker = &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/"}}
			}
			cl.HealthChecks = append(cl.HealthChecks, hc)
		}
		if cb := bs.CircuitBreaker; cb != nil {
			t := &clusterv3.CircuitBreakers_Thresholds{Priority: corev3.RoutingPriority_DEFAULT}
			u32 := func(v *int64) *wrapperspb.UInt32Value {
				if v == nil {
					return nil
				}
				return wrapperspb.UInt32(uint32(*v))
			}
			t.MaxConnections, t.MaxPendingRequests, t.MaxRequests = u32(cb.MaxConnections), u32(cb.MaxPendingRequests), u32(cb.MaxParallelRequests)
			cl.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{t}}
		}
	}

	h := &hcmv3.HttpConnectionManager{StatPrefix: "http-80", CodecType: hcmv3.HttpConnectionManager_AUTO, HttpFilters: []*hcmv3.HttpFilter{
		{Name: "envoy.filters.http.ext_proc/kafka-ext-proc", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(cfg)}},
		routerFilter(),
	}}
	if ctp != nil && ctp.Spec.Timeout != nil && ctp.Spec.Timeout.HTTP != nil {
		d, err := duration(ctp.Spec.Timeout.HTTP.StreamIdleTimeout)
		if err != nil {
			problem("streamIdleTimeout: %v", err)
		}
		h.StreamIdleTimeout = d
	}

	byName := map[string]*egv1a1.HTTPRouteFilter{}
	for _, f := range filters {
		byName[f.Name] = f
	}
	var prefixes []string
	grpcRoute := false
	vh := &routev3.VirtualHost{Name: "http-80", Domains: []string{"*"}}
	for i, rule := range route.Spec.Rules {
		var dr *egv1a1.HTTPDirectResponseFilter
		for _, f := range rule.Filters {
			if f.Type == gwv1.HTTPRouteFilterExtensionRef && f.ExtensionRef != nil && f.ExtensionRef.Kind == "HTTPRouteFilter" {
				if hf := byName[string(f.ExtensionRef.Name)]; hf != nil {
					dr = hf.Spec.DirectResponse
				}
			}
		}
		if dr == nil || dr.StatusCode == nil || len(rule.BackendRefs) > 0 {
			problem("HTTPRoute rule %d does not answer with an HTTPRouteFilter directResponse: the processor answers every request, so a route that forwards would pass on what it let through", i)
			continue
		}
		body := ""
		if dr.Body != nil && dr.Body.Inline != nil {
			body = *dr.Body.Inline
		}
		for _, m := range rule.Matches {
			rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
			if m.Path != nil && m.Path.Value != nil {
				if m.Path.Type == nil || *m.Path.Type != gwv1.PathMatchPathPrefix {
					problem("HTTPRoute rule %d: only PathPrefix matches are modelled", i)
					continue
				}
				rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: *m.Path.Value}
				prefixes = append(prefixes, *m.Path.Value)
			}
			for _, hm := range m.Headers {
				if strings.EqualFold(string(hm.Name), "content-type") && hm.Type != nil && *hm.Type == gwv1.HeaderMatchRegularExpression && strings.HasPrefix(hm.Value, "application/grpc") {
					grpcRoute = true
				}
				rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{Name: string(hm.Name), HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: hm.Value}}}}})
			}
			vh.Routes = append(vh.Routes, &routev3.Route{Name: fmt.Sprintf("rule-%d", i), Match: rm, Action: directResponse(uint32(*dr.StatusCode), body)})
		}
	}
	h.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: "http-80", VirtualHosts: []*routev3.VirtualHost{vh}}}
	return bootstrapOf("http-80", 10080, h, cl), prefixes, grpcRoute, errors.Join(errs...)
}

func checkEnvoyGateway(manifests []byte, r *rendered) error {
	objs, err := decodeAll(manifests)
	if err != nil {
		return err
	}
	gw, err := only[*gwv1.Gateway](objs)
	if err != nil {
		return err
	}
	route, err := only[*gwv1.HTTPRoute](objs)
	if err != nil {
		return err
	}
	eep, err := only[*egv1a1.EnvoyExtensionPolicy](objs)
	if err != nil {
		return err
	}
	ctp, err := only[*egv1a1.ClientTrafficPolicy](objs)
	if err != nil {
		return err
	}
	ep, err := only[*egv1a1.EnvoyProxy](objs)
	if err != nil {
		return err
	}
	var filters []*egv1a1.HTTPRouteFilter
	for _, o := range objs {
		if f, ok := o.(*egv1a1.HTTPRouteFilter); ok {
			filters = append(filters, f)
		}
	}
	var errs []error
	problem := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	targets := func(what string, refs []gwv1.LocalPolicyTargetReferenceWithSectionName) {
		if !slices.ContainsFunc(refs, func(t gwv1.LocalPolicyTargetReferenceWithSectionName) bool {
			return t.Kind == "Gateway" && string(t.Name) == gw.Name
		}) {
			problem("%s does not target Gateway %q", what, gw.Name)
		}
	}
	if ref := gw.Spec.Infrastructure; ref == nil || ref.ParametersRef == nil || ref.ParametersRef.Kind != "EnvoyProxy" || ref.ParametersRef.Name != ep.Name {
		problem("Gateway %q does not run the EnvoyProxy %q, which pins the Envoy version", gw.Name, ep.Name)
	}
	var image string
	if k := ep.Spec.Provider; k != nil && k.Kubernetes != nil && k.Kubernetes.EnvoyDeployment != nil && k.Kubernetes.EnvoyDeployment.Container != nil && k.Kubernetes.EnvoyDeployment.Container.Image != nil {
		image = *k.Kubernetes.EnvoyDeployment.Container.Image
	}
	if err := checkEnvoyImage(image); err != nil {
		errs = append(errs, err)
	}
	targets("EnvoyExtensionPolicy", eep.Spec.TargetRefs)
	targets("ClientTrafficPolicy", ctp.Spec.TargetRefs)
	if !slices.ContainsFunc(route.Spec.ParentRefs, func(p gwv1.ParentReference) bool { return string(p.Name) == gw.Name }) {
		problem("HTTPRoute is not attached to Gateway %q", gw.Name)
	}
	b, prefixes, grpcRoute, err := egBootstrap(eep, ctp, route, filters, r.service)
	errs = append(errs, err)
	if b != nil {
		if err := checkBootstrap(b, r); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkCoverage(r.cfg, prefixes, grpcRoute))
	return errors.Join(errs...)
}
