package envoy

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// defaultLimits are the processor's default limits.max-wait and
// limits.reply-timeout, and its gRPC server's keepalive minimum
// (stack.KeepaliveMinTime, which imports this package; the stack tests tie
// the two to envoy.yaml).
var defaultLimits = CheckOptions{MaxWait: 60 * time.Second, ReplyTimeout: 30 * time.Second, PingMinTime: 5 * time.Second}

const shipped = "envoy.yaml"

func TestShippedConfig(t *testing.T) {
	b, err := Load(shipped)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := Validate(b); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if err := Check(b, defaultLimits); err != nil {
		t.Fatalf("Check: %v", err)
	}
	got, err := SettingsFrom(b)
	if err != nil {
		t.Fatalf("SettingsFrom: %v", err)
	}
	want := Settings{
		StreamIdleTimeout:   300 * time.Second,
		RequestTimeout:      0,
		MaxRequestHeadersKB: 60,
		CodecType:           "AUTO",
		ExtProc: ExtProc{
			ClusterName:          "kafka_ext_proc",
			RequestHeaderMode:    "SEND",
			RequestBodyMode:      "FULL_DUPLEX_STREAMED",
			RequestTrailerMode:   "SEND",
			ResponseHeaderMode:   "SKIP",
			ResponseBodyMode:     "NONE",
			ResponseTrailerMode:  "SKIP",
			FailureModeAllow:     false,
			StatusOnError:        504,
			MessageTimeout:       200 * time.Millisecond,
			ForwardingNamespaces: []string{"envoy.filters.http.jwt_authn"},
		},
		Routes: []Route{
			{Name: "grpc", Prefix: "/", GRPC: true, Cluster: "placeholder", Timeout: 0, TimeoutSet: true, IdleTimeout: time.Hour},
			{Name: "http", Prefix: "/", DirectResponseStatus: 504, DirectResponseBody: "no answer from kafka-ext-proc\n"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SettingsFrom:\n got %+v\nwant %+v", got, want)
	}
}

// edited returns the shipped envoy.yaml with old replaced by new, failing the
// test unless old occurs exactly once, so a broken copy cannot silently be the
// unbroken file.
func edited(t *testing.T, pairs ...string) []byte {
	t.Helper()
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(pairs); i += 2 {
		if n := strings.Count(s, pairs[i]); n != 1 {
			t.Fatalf("%q occurs %d times in %s, want 1", pairs[i], n, shipped)
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return []byte(s)
}

// lineOf is the 1-based line of the first line of the unique text s in data.
func lineOf(t *testing.T, data []byte, s string) int {
	t.Helper()
	first, _, _ := strings.Cut(s, "\n")
	i := strings.Index(string(data), first)
	if i < 0 {
		t.Fatalf("%q not in the edited file", first)
	}
	return strings.Count(string(data[:i]), "\n") + 1
}

func wantErr(t *testing.T, stage string, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one containing %q", stage, subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s error does not contain %q:\n%v", stage, s, err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name     string
		old, new string
		want     []string
	}{
		{"unknown field at top level", "static_resources:\n", "no_such_field: 1\nstatic_resources:\n", []string{`unknown field "no_such_field"`, "(YAML line %d)"}},
		{"unknown field inside the ext_proc typed_config", "failure_mode_allow: false\n", "no_such_option: true\n              failure_mode_allow: false\n", []string{`unknown field "no_such_option"`, "(YAML line %d)"}},
		{"unknown type URL", "envoy.extensions.filters.http.router.v3.Router\n", "envoy.extensions.filters.http.router.v3.NoSuchRouter\n", []string{"NoSuchRouter"}},
		{"duplicate key", "stat_prefix: ingress\n", "stat_prefix: ingress\n          stat_prefix: again\n", []string{"stat_prefix"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := edited(t, tc.old, tc.new)
			_, err := Parse(data)
			// "%d" stands for the line of the edit, so that the test does not
			// depend on where envoy.yaml has it.
			want := slices.Clone(tc.want)
			for i, w := range want {
				if strings.Contains(w, "%d") {
					want[i] = fmt.Sprintf(w, lineOf(t, data, tc.new))
				}
			}
			wantErr(t, "Parse", err, want...)
		})
	}
}

func TestValidateNamesTheTypedConfig(t *testing.T) {
	const (
		extProc = `http_filters[0]("envoy.filters.http.ext_proc").typed_config <type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor>`
		hcm     = `filters[0]("envoy.filters.network.http_connection_manager").typed_config <type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager>`
	)
	cases := []struct {
		name     string
		old, new string
		want     []string
	}{
		{"ext_proc grpc_service without a target",
			"grpc_service:\n                envoy_grpc: { cluster_name: kafka_ext_proc }",
			"grpc_service: { timeout: 1s }",
			[]string{`listeners[0]("ingress")`, extProc, "GrpcService.TargetSpecifier"}},
		{"HCM without stat_prefix", "stat_prefix: ingress\n", "", []string{hcm, "StatPrefix"}},
		{"undefined enum value in the ext_proc processing_mode",
			"request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: 42",
			[]string{extProc, "RequestBodyMode"}},
		{"invalid typed config in a cluster's protocol options",
			"connection_keepalive: { interval: 10s, timeout: 5s }",
			"connection_keepalive: { interval: 10s, timeout: 5s }\n            max_concurrent_streams: 0",
			[]string{`clusters[0]("kafka_ext_proc").typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]`, "MaxConcurrentStreams"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Parse(edited(t, tc.old, tc.new))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			wantErr(t, "Validate", Validate(b), tc.want...)
		})
	}
}

func TestCheckRejects(t *testing.T) {
	cases := []struct {
		name  string
		pairs []string
		opts  CheckOptions
		want  []string
	}{
		{"FULL_DUPLEX_STREAMED with request trailers skipped",
			[]string{"request_trailer_mode: SEND", "request_trailer_mode: SKIP"}, defaultLimits,
			[]string{`"envoy.filters.http.ext_proc"`, "request_body_mode FULL_DUPLEX_STREAMED requires request_trailer_mode SEND (got SKIP)"}},
		{"route to a missing cluster",
			[]string{"cluster: placeholder", "cluster: nowhere"}, defaultLimits,
			[]string{`routes[0] "grpc"`, `cluster "nowhere" is not defined`}},
		{"ext_proc service on a missing cluster",
			[]string{"cluster_name: kafka_ext_proc }", "cluster_name: elsewhere }"}, defaultLimits,
			[]string{`"envoy.filters.http.ext_proc" grpc_service: cluster "elsewhere" is not defined`}},
		{"gRPC route idle timeout below max-wait",
			[]string{"idle_timeout: 3600s", "idle_timeout: 45s"}, defaultLimits,
			[]string{`routes[0] "grpc": idle_timeout 45s is not above limits.max-wait 1m0s`}},
		{"stream idle timeout below both limits",
			[]string{"stream_idle_timeout: 300s", "stream_idle_timeout: 20s"}, defaultLimits,
			[]string{"stream_idle_timeout 20s is not above limits.max-wait 1m0s", "stream_idle_timeout 20s is not above limits.reply-timeout 30s"}},
		{"shipped stream idle timeout below a raised sse-heartbeat",
			nil, CheckOptions{MaxWait: 60 * time.Second, ReplyTimeout: 30 * time.Second, SSEHeartbeat: 10 * time.Minute, PingMinTime: 5 * time.Second},
			[]string{"stream_idle_timeout 5m0s is not above limits.sse-heartbeat 10m0s: Envoy would end quiet event streams between two heartbeats"}},
		{"shipped timeouts below raised limits",
			nil, CheckOptions{MaxWait: 10 * time.Minute, ReplyTimeout: 30 * time.Second, PingMinTime: 5 * time.Second},
			[]string{"stream_idle_timeout 5m0s is not above limits.max-wait 10m0s"}},
		{"unsupported processing mode",
			[]string{"response_header_mode: SKIP", "response_header_mode: SEND", "request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: BUFFERED"}, defaultLimits,
			[]string{"response_header_mode is SEND; the processor supports only SKIP", "request_body_mode is BUFFERED; the processor supports only FULL_DUPLEX_STREAMED"}},
		{"unset header mode reported with its meaning",
			[]string{"                response_header_mode: SKIP\n", ""}, defaultLimits,
			[]string{"response_header_mode is DEFAULT (= SEND); the processor supports only SKIP"}},
		{"fail open",
			[]string{"failure_mode_allow: false", "failure_mode_allow: true"}, defaultLimits,
			[]string{"failure_mode_allow is true"}},
		{"processor cluster without HTTP/2, gRPC health check or raised circuit breakers",
			[]string{
				"http2_protocol_options:\n            # HTTP/2 PINGs", "http_protocol_options: {}\n            # HTTP/2 PINGs",
				"connection_keepalive: { interval: 10s, timeout: 5s }", "",
				"grpc_health_check: {}", "http_health_check: { path: /healthz }",
				"max_requests: 100000", "max_requests: 1024",
			}, defaultLimits,
			[]string{`cluster "kafka_ext_proc" (ext_proc): does not use HTTP/2`, "no grpc_health_check", "max_requests is 1024"}},
		{"filter after the router",
			[]string{"      - name: envoy.filters.http.router\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n",
				"      - name: envoy.filters.http.router\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n" +
					"          - name: envoy.filters.http.ext_proc.again\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor\n" +
					"              grpc_service: { envoy_grpc: { cluster_name: kafka_ext_proc } }\n"},
			defaultLimits,
			[]string{"2 ext_proc filters, want exactly 1", "the router must be the last HTTP filter"}},
		{"per-route override that fails open",
			[]string{
				"                # typed_per_filter_config:\n                #   envoy.filters.http.ext_proc:\n                #     \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n                #     overrides:\n",
				"                typed_per_filter_config:\n                  envoy.filters.http.ext_proc:\n                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n                    overrides:\n                      failure_mode_allow: true\n",
			}, defaultLimits,
			[]string{`routes[0] "grpc" typed_per_filter_config "envoy.filters.http.ext_proc": overrides.failure_mode_allow is true`}},
		{"processor pinged more often than its gRPC server permits",
			[]string{"connection_keepalive: { interval: 10s, timeout: 5s }", "connection_keepalive: { interval: 4s, timeout: 2s }"}, defaultLimits,
			[]string{`cluster "kafka_ext_proc" (ext_proc): http2_protocol_options.connection_keepalive.interval 4s is below the processor's keepalive enforcement minimum 5s`}},
		{"shipped keepalive against grpc-go's default enforcement",
			nil, CheckOptions{MaxWait: 60 * time.Second, ReplyTimeout: 30 * time.Second},
			[]string{"connection_keepalive.interval 10s is below the processor's keepalive enforcement minimum 5m0s"}},
		{"probes listener exposing more of the admin interface",
			[]string{"match: { path: /ready, headers:", "match: { prefix: /, headers:"}, defaultLimits,
			[]string{`listener "probes"`, `routes[0] "ready": only an exact path /ready with :method GET may reach the admin interface`}},
		{"probes listener admitting POST",
			[]string{`string_match: { exact: GET }`, `string_match: { exact: POST }`}, defaultLimits,
			[]string{`routes[0] "ready": only an exact path /ready with :method GET`}},
		{"probes listener bypassing the processor",
			[]string{"route: { cluster: envoy_admin }", "route: { cluster: kafka_ext_proc }"}, defaultLimits,
			[]string{`routes[0] "ready": a listener without ext_proc may only answer directly or route to a cluster of the admin address`}},
		{"admin cluster pointing elsewhere",
			[]string{"        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9901 } } }", "        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9902 } } }"}, defaultLimits,
			[]string{`routes[0] "ready": a listener without ext_proc may only answer directly`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Parse(edited(t, tc.pairs...))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if err := Validate(b); err != nil {
				t.Fatalf("Validate (the broken copy must fail Check only): %v", err)
			}
			wantErr(t, "Check", Check(b, tc.opts), tc.want...)
		})
	}
}

// The commented-out per-route binding example in envoy.yaml must be valid
// once uncommented, and SettingsFrom must report it on its route.
func TestPerRouteBindingExample(t *testing.T) {
	data := edited(t,
		"                # typed_per_filter_config:\n"+
			"                #   envoy.filters.http.ext_proc:\n"+
			"                #     \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n"+
			"                #     overrides:\n"+
			"                #       grpc_initial_metadata:\n"+
			"                #       - { key: x-kafka-ext-proc-binding, value: grpc0 }\n",
		"                typed_per_filter_config:\n"+
			"                  envoy.filters.http.ext_proc:\n"+
			"                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n"+
			"                    overrides:\n"+
			"                      grpc_initial_metadata:\n"+
			"                      - { key: x-kafka-ext-proc-binding, value: grpc0 }\n")
	b, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := Validate(b); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if err := Check(b, defaultLimits); err != nil {
		t.Fatalf("Check: %v", err)
	}
	s, err := SettingsFrom(b)
	if err != nil {
		t.Fatalf("SettingsFrom: %v", err)
	}
	if got, want := s.Routes[0].ExtProcInitialMetadata, map[string]string{"x-kafka-ext-proc-binding": "grpc0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("grpc route metadata = %v, want %v", got, want)
	}
	if s.Routes[1].ExtProcInitialMetadata != nil {
		t.Errorf("http route metadata = %v, want none", s.Routes[1].ExtProcInitialMetadata)
	}
}

// Envoy merges per-route configs from the least to the most specific level:
// metadata keys of a more specific level win, the others stay; disabled comes
// from the most specific config.
func TestPerRouteMerge(t *testing.T) {
	data := edited(t,
		"            virtual_hosts:\n            - name: all\n              domains: [\"*\"]\n",
		"            virtual_hosts:\n            - name: all\n              domains: [\"*\"]\n"+
			"              typed_per_filter_config:\n"+
			"                envoy.filters.http.ext_proc:\n"+
			"                  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n"+
			"                  overrides:\n"+
			"                    grpc_initial_metadata:\n"+
			"                    - { key: x-kafka-ext-proc-binding, value: http0 }\n"+
			"                    - { key: x-tenant, value: a }\n",
		"                # typed_per_filter_config:\n"+
			"                #   envoy.filters.http.ext_proc:\n"+
			"                #     \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n"+
			"                #     overrides:\n"+
			"                #       grpc_initial_metadata:\n"+
			"                #       - { key: x-kafka-ext-proc-binding, value: grpc0 }\n",
		"                typed_per_filter_config:\n"+
			"                  envoy.filters.http.ext_proc:\n"+
			"                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n"+
			"                    overrides:\n"+
			"                      grpc_initial_metadata:\n"+
			"                      - { key: x-kafka-ext-proc-binding, value: grpc0 }\n",
		"direct_response: { status: 504,",
		"typed_per_filter_config: { envoy.filters.http.ext_proc: { \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute, disabled: true } }\n"+
			"                direct_response: { status: 504,")
	b, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := Validate(b); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	s, err := SettingsFrom(b)
	if err != nil {
		t.Fatalf("SettingsFrom: %v", err)
	}
	if got, want := s.Routes[0].ExtProcInitialMetadata, map[string]string{"x-kafka-ext-proc-binding": "grpc0", "x-tenant": "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("grpc route metadata = %v, want %v", got, want)
	}
	if s.Routes[0].ExtProcDisabled || !s.Routes[1].ExtProcDisabled {
		t.Errorf("disabled = %v, %v; want false, true", s.Routes[0].ExtProcDisabled, s.Routes[1].ExtProcDisabled)
	}
}

func TestSettingsFromRefuses(t *testing.T) {
	t.Run("RDS", func(t *testing.T) {
		b, err := Load(shipped)
		if err != nil {
			t.Fatal(err)
		}
		f := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0]
		h := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
			t.Fatal(err)
		}
		h.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "local"}}
		a, err := anypb.New(h)
		if err != nil {
			t.Fatal(err)
		}
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
		_, err = SettingsFrom(b)
		wantErr(t, "SettingsFrom", err, "RDS")
		wantErr(t, "Check", Check(b, defaultLimits), "RDS")
	})
	cases := []struct {
		name  string
		pairs []string
		want  []string
	}{
		{"header matcher", []string{`match: { prefix: "/" }`, `match: { prefix: "/", headers: [{ name: x-a, present_match: true }] }`},
			[]string{`routes[1] "http"`, "only prefix, path and grpc matchers"}},
		{"second virtual host", []string{"            - name: all\n", "            - name: other\n              domains: [example.com]\n              routes: [{ match: { prefix: / }, direct_response: { status: 404 } }]\n            - name: all\n"},
			[]string{"exactly one virtual host"}},
		{"processing mode override", []string{
			"                # typed_per_filter_config:\n                #   envoy.filters.http.ext_proc:\n                #     \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n                #     overrides:\n",
			"                typed_per_filter_config:\n                  envoy.filters.http.ext_proc:\n                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n                    overrides:\n                      processing_mode: { request_header_mode: SEND }\n",
		}, []string{`routes[0] "grpc"`, "processing_mode"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Parse(edited(t, tc.pairs...))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			_, err = SettingsFrom(b)
			wantErr(t, "SettingsFrom", err, tc.want...)
		})
	}
}

// uncommented returns the shipped envoy.yaml with the commented blocks named
// (between "# >>> name" and "# <<< name") uncommented, failing the test if a
// block is missing.
func uncommented(t *testing.T, data []byte, names ...string) []byte {
	t.Helper()
	out, err := Uncommented(data, names...)
	if err != nil {
		t.Fatalf("%s: %v", shipped, err)
	}
	return out
}

// shippedWith is the shipped file with the named blocks uncommented, loaded
// and checked as the processor's validate does.
func shippedWith(t *testing.T, blocks ...string) *bootstrapv3.Bootstrap {
	t.Helper()
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(uncommented(t, data, blocks...))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := Validate(b); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if err := Check(b, defaultLimits); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return b
}

// The commented downstream TLS and Envoy→processor mTLS blocks pass every
// check once uncommented, and put their TLS contexts where Envoy uses them.
func TestTLSExamples(t *testing.T) {
	b := shippedWith(t, "downstream-tls", "processor-mtls")
	const tlsType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
	if got := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetTransportSocket().GetTypedConfig().GetTypeUrl(); got != tlsType+"DownstreamTlsContext" {
		t.Errorf("ingress transport socket %q, want a DownstreamTlsContext", got)
	}
	var procSocket string
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() == "kafka_ext_proc" {
			procSocket = cl.GetTransportSocket().GetTypedConfig().GetTypeUrl()
		}
	}
	if procSocket != tlsType+"UpstreamTlsContext" {
		t.Errorf("processor cluster transport socket %q, want an UpstreamTlsContext", procSocket)
	}
}

// The uncommented blocks go through the same strict loading: a misspelt field
// in either one is refused.
func TestTLSExamplesRejectTypos(t *testing.T) {
	for _, tc := range []struct{ block, old, new string }{
		{"downstream-tls", "#       alpn_protocols: [h2, http/1.1]", "#       alpn_protocol: [h2, http/1.1]"},
		{"processor-mtls", "#     sni: kafka-ext-proc", "#     server_name: kafka-ext-proc"},
	} {
		t.Run(tc.block, func(t *testing.T) {
			_, err := Parse(uncommented(t, edited(t, tc.old, tc.new), tc.block))
			wantErr(t, "Parse", err, "unknown field")
		})
	}
}

// A bootstrap whose only ext_proc filter is gone is not let through as a
// probes-only config.
func TestCheckNeedsAnExtProcListener(t *testing.T) {
	b, err := Load(shipped)
	if err != nil {
		t.Fatal(err)
	}
	f := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0]
	h := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	h.HttpFilters = slices.DeleteFunc(h.HttpFilters, func(hf *hcmv3.HttpFilter) bool { return hf.GetName() == "envoy.filters.http.ext_proc" })
	a, err := anypb.New(h)
	if err != nil {
		t.Fatal(err)
	}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	wantErr(t, "Check", Check(b, defaultLimits), "no listener runs the ext_proc filter",
		`listener "ingress"`, `routes[0] "grpc": a listener without ext_proc may only answer directly or route to a cluster of the admin address`)
}

// The commented CORS blocks pass every check once uncommented: the CORS
// filter comes before ext_proc (Envoy answers preflights), and the CORS
// policy sits on a route with a route action, since Envoy's CORS filter
// skips direct_response routes.
func TestCORSExample(t *testing.T) {
	b := shippedWith(t, "cors-route", "cors-filter")
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	if cors, ep := slices.Index(names, "envoy.filters.http.cors"), slices.Index(names, "envoy.filters.http.ext_proc"); cors < 0 || cors > ep {
		t.Errorf("filters %v: want the CORS filter before ext_proc", names)
	}
	var withPolicy []string
	for _, r := range hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		if _, ok := r.GetTypedPerFilterConfig()["envoy.filters.http.cors"]; ok {
			if r.GetRoute() == nil {
				t.Errorf("route %q has a CORS policy but no route action: Envoy's CORS filter skips it", r.GetName())
			}
			withPolicy = append(withPolicy, r.GetName())
		}
	}
	if len(withPolicy) != 1 {
		t.Errorf("routes with a CORS policy: %v, want one", withPolicy)
	}
}
