package kubernetes

import (
	"strings"
	"testing"
)

// The files of each setup, from this directory.
const (
	standaloneManifests = "standalone/envoy.yaml"
	shippedEnvoy        = "../../envoy/envoy.yaml"
	envoyConfigMapKey   = "envoy.yaml"
	istioManifests      = "istio/envoyfilter.yaml"
	istioRoutes         = "istio/gateway.yaml"
	egManifests         = "envoy-gateway/gateway.yaml"
)

func defaultRelease(t *testing.T) *rendered {
	t.Helper()
	r, err := renderChart(chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func istioFiles(t *testing.T) []byte {
	t.Helper()
	return append(append(readFile(t, istioManifests), "\n---\n"...), readFile(t, istioRoutes)...)
}

func TestStandalone(t *testing.T) {
	// The ConfigMap the Deployment mounts is made, by the README's step, of
	// the very file checked here.
	const step = "kubectl -n kafka-ext-proc create configmap envoy --from-file=" + envoyConfigMapKey + "=envoy/envoy.yaml"
	if !strings.Contains(string(readFile(t, "standalone/README.md")), step) {
		t.Errorf("standalone/README.md does not say %q", step)
	}
	if err := checkStandalone(readFile(t, standaloneManifests), readFile(t, shippedEnvoy), envoyConfigMapKey, defaultRelease(t)); err != nil {
		t.Fatal(err)
	}
}

func TestIstio(t *testing.T) {
	if err := checkIstio(istioFiles(t), defaultRelease(t)); err != nil {
		t.Fatal(err)
	}
}

func TestEnvoyGateway(t *testing.T) {
	if err := checkEnvoyGateway(readFile(t, egManifests), defaultRelease(t)); err != nil {
		t.Fatal(err)
	}
}

// Each check of the setups fails on a deliberately broken copy.
func TestSetupChecksFail(t *testing.T) {
	r := defaultRelease(t)
	t.Run("standalone", func(t *testing.T) {
		manifests, shipped := readFile(t, standaloneManifests), readFile(t, shippedEnvoy)
		cases := []struct {
			name             string
			manifests, envoy []string
			want             string
		}{
			{"unknown field", []string{"  replicas: 2\n", "  replicas: 2\n  replica: 2\n"}, nil, `unknown field "replica"`},
			{"Envoy below the floor", []string{"envoyproxy/envoy:v1.38.3@", "envoyproxy/envoy:v1.37.4@"}, nil, "below Envoy 1.37.5"},
			{"Envoy by tag only", []string{"@sha256:5f7c43e1147412fdb3af578c651c67478a3df818eae89d2261e707e06c209cdb", ""}, nil, "not pinned by digest"},
			{"config from another key", []string{"items: [{ key: envoy.yaml, path: envoy.yaml }]", "items: [{ key: other.yaml, path: envoy.yaml }]"}, nil, "is not the ConfigMap key envoy.yaml mounted"},
			{"readiness on the ingress port", []string{"        readinessProbe:\n          httpGet: { path: /ready, port: probes }", "        readinessProbe:\n          httpGet: { path: /ready, port: http }"}, nil, `probe port "http" is not a listener that routes GET /ready`},
			{"probes listener port not exposed", []string{"        - { name: probes, containerPort: 9902 }\n", ""}, nil, `listener "probes" port 9902 is not a container port`},
			{"client address lost", []string{"  externalTrafficPolicy: Local\n", ""}, nil, "externalTrafficPolicy"},
			{"processor elsewhere", nil, []string{"address: kafka-ext-proc, port_value: 50051", "address: processor, port_value: 50051"}, "want the chart's Service kafka-ext-proc:50051"},
			{"timer below the processor's waits", nil, []string{"stream_idle_timeout: 300s", "stream_idle_timeout: 20s"}, "stream_idle_timeout 20s is not above limits.max-wait"},
			{"keepalive the processor refuses", nil, []string{"connection_keepalive: { interval: 10s, timeout: 5s }", "connection_keepalive: { interval: 1s, timeout: 5s }"}, "too_many_pings"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				m, e := manifests, shipped
				if tc.manifests != nil {
					m = edited(t, m, tc.manifests...)
				}
				if tc.envoy != nil {
					e = edited(t, e, tc.envoy...)
				}
				wantErr(t, checkStandalone(m, e, envoyConfigMapKey, r), tc.want)
			})
		}
	})
	t.Run("istio", func(t *testing.T) {
		cases := []struct {
			name  string
			pairs []string
			want  string
		}{
			{"unknown field in the spec", []string{"  workloadSelector:\n", "  workloadSelectr:\n"}, "workloadSelectr"},
			{"unknown field in an Envoy patch", []string{"          failure_mode_allow: false\n", "          failure_mode_alow: false\n"}, `unknown field "failure_mode_alow"`},
			{"fail open", []string{"          failure_mode_allow: false\n", "          failure_mode_allow: true\n"}, "failure_mode_allow is true"},
			{"unsupported processing mode", []string{"            request_body_mode: FULL_DUPLEX_STREAMED\n", "            request_body_mode: STREAMED\n"}, "request_body_mode is STREAMED"},
			{"no health checks", []string{"          grpc_health_check: {}\n", "          tcp_health_check: {}\n"}, "no grpc_health_check"},
			{"timer below the processor's waits", []string{"stream_idle_timeout: 3600s", "stream_idle_timeout: 45s"}, "stream_idle_timeout 45s is not above limits.max-wait"},
			{"processor elsewhere", []string{"address: kafka-ext-proc.kafka-ext-proc.svc.cluster.local", "address: kafka-ext-proc.default.svc.cluster.local"}, "want the chart's Service kafka-ext-proc.kafka-ext-proc.svc.cluster.local:50051"},
			{"filter after the router", []string{"      operation: INSERT_BEFORE\n", "      operation: INSERT_AFTER\n"}, "want INSERT_BEFORE envoy.filters.http.router"},
			{"configured path not routed", []string{"    - uri: { prefix: /items }\n", "    - uri: { prefix: /things }\n"}, `configured path "/items…" matches none of the route prefixes [/things]`},
			{"route forwarding", []string{"    directResponse: { status: 504 }\n", "    route: [{ destination: { host: backend } }]\n"}, `VirtualService route "grpc" forwards`},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				wantErr(t, checkIstio(edited(t, istioFiles(t), tc.pairs...), r), tc.want)
			})
		}
	})
	t.Run("envoy-gateway", func(t *testing.T) {
		cases := []struct {
			name  string
			pairs []string
			want  string
		}{
			{"unknown field", []string{"    failOpen: false\n", "    failOpn: false\n"}, `unknown field "failOpn"`},
			{"streamed body", []string{"        body: FullDuplexStreamed\n", "        body: Streamed\n"}, "request_body_mode is STREAMED"},
			{"response sent to the processor", []string{"      request:\n        body: FullDuplexStreamed\n", "      request:\n        body: FullDuplexStreamed\n      response: {}\n"}, "response_header_mode is SEND"},
			{"fail open", []string{"    failOpen: false\n", "    failOpen: true\n"}, "failure_mode_allow is true"},
			{"TCP health checks", []string{"          type: GRPC\n          grpc: {}\n", "          type: TCP\n          tcp: {}\n"}, "no grpc_health_check"},
			{"default circuit breakers", []string{"      circuitBreaker:\n        maxConnections: 100000\n        maxPendingRequests: 100000\n        maxParallelRequests: 100000\n", ""}, "max_requests is 1024"},
			{"timer below the processor's waits", []string{"streamIdleTimeout: 3600s", "streamIdleTimeout: 50s"}, "stream_idle_timeout 50s is not above limits.max-wait"},
			{"admin port as backend", []string{"    - { name: kafka-ext-proc, port: 50051 }\n", "    - { name: kafka-ext-proc, port: 9090 }\n"}, "is not the Service's grpc port"},
			{"configured path not routed", []string{"value: /items }", "value: /things }"}, `configured path "/items…" matches none`},
			{"Envoy below the floor", []string{"image: envoyproxy/envoy:v1.38.3@", "image: envoyproxy/envoy:v1.36.2@"}, "below Envoy 1.37.5"},
			{"Envoy version not set", []string{"  infrastructure:\n    parametersRef: { group: gateway.envoyproxy.io, kind: EnvoyProxy, name: kafka-ext-proc }\n", ""}, "does not run the EnvoyProxy"},
			{"policy on another gateway", []string{"name: kafka-ext-proc }\n  extProc:\n", "name: other }\n  extProc:\n"}, `EnvoyExtensionPolicy does not target Gateway "kafka-ext-proc"`},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				wantErr(t, checkEnvoyGateway(edited(t, readFile(t, egManifests), tc.pairs...), r), tc.want)
			})
		}
	})
}
