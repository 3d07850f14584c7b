package envoy

import "time"

// Settings is what the Envoy emulator needs to know of an envoy.yaml: the
// listener, the ext_proc filter and the routes, reduced to plain values.
// SettingsFrom derives it from a loaded bootstrap and refuses what it cannot
// express; the emulator refuses what it does not emulate.
type Settings struct {
	// StreamIdleTimeout is the HCM stream_idle_timeout (0 = disabled).
	StreamIdleTimeout time.Duration
	// RequestTimeout is the HCM request_timeout (0 = disabled).
	RequestTimeout time.Duration
	// MaxRequestHeadersKB is the HCM max_request_headers_kb (Envoy default 60).
	MaxRequestHeadersKB int
	// CodecType is the HCM codec_type as the proto enum name ("AUTO", "HTTP1",
	// "HTTP2", "HTTP3").
	CodecType string

	// Tracing is true when the HCM traces requests with the OpenTelemetry
	// tracer: Envoy then starts a span for each request (continuing a valid
	// W3C traceparent of the request) and a child span for the ext_proc
	// stream, whose context it puts in the stream's initial metadata.
	Tracing bool

	ExtProc ExtProc
	Routes  []Route
}

// ExtProc is the ext_proc filter's configuration.
type ExtProc struct {
	// ClusterName is the envoy_grpc cluster; Envoy sends it as :authority
	// unless Authority is set.
	ClusterName string
	Authority   string
	// InitialMetadata is grpc_service.initial_metadata, sent on every Process stream.
	InitialMetadata map[string]string

	// Processing mode, as the proto enum names (e.g. "SEND", "SKIP",
	// "FULL_DUPLEX_STREAMED", "NONE"; "DEFAULT" stands for an unset header mode).
	RequestHeaderMode   string
	RequestBodyMode     string
	RequestTrailerMode  string
	ResponseHeaderMode  string
	ResponseBodyMode    string
	ResponseTrailerMode string

	FailureModeAllow bool
	// StatusOnError is the HTTP status of a local reply on a processor error (Envoy default 500).
	StatusOnError int
	// MessageTimeout is message_timeout (Envoy default 200ms; unused in FDS).
	MessageTimeout time.Duration
	// ForwardingNamespaces are metadata_options.forwarding_namespaces.untyped.
	ForwardingNamespaces []string
}

// Route is one route of the listener's route configuration, in order.
type Route struct {
	Name string
	// Match: Prefix (or Path for an exact match); GRPC means match.grpc is set
	// (content-type application/grpc*).
	Prefix string
	Path   string
	GRPC   bool

	// DirectResponseStatus is set for direct_response routes (0 otherwise).
	DirectResponseStatus int
	// DirectResponseBody is the direct_response inline body ("" if none).
	DirectResponseBody string
	// Cluster is set for routes to a cluster.
	Cluster string
	// Timeout is route.timeout (Envoy default 15s; 0 = disabled) and
	// IdleTimeout route.idle_timeout (0 = unset: the HCM stream_idle_timeout applies).
	Timeout     time.Duration
	TimeoutSet  bool
	IdleTimeout time.Duration

	// ExtProcInitialMetadata is the per-route ExtProcPerRoute
	// overrides.grpc_initial_metadata (e.g. x-kafka-ext-proc-binding), merged
	// over the route configuration and virtual host levels as Envoy merges
	// them. Envoy adds it to ExtProc.InitialMetadata, replacing equal keys
	// (ext_proc.cc mergePerRouteConfig).
	ExtProcInitialMetadata map[string]string
	// ExtProcDisabled is ExtProcPerRoute.disabled.
	ExtProcDisabled bool

	// CORS is the route's effective CORS policy when the HCM has a CORS
	// filter (before ext_proc), nil otherwise.
	CORS *CORSPolicy
}
