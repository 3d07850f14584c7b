package emulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"google.golang.org/grpc"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// Options configures an Emulator.
type Options struct {
	// Settings are the envoy.yaml settings to emulate.
	Settings envoy.Settings
	// Processor is a connection to the ext_proc server (Envoy's ext_proc
	// cluster). Its credentials must allow a per-call :authority (insecure
	// and TLS credentials do).
	Processor grpc.ClientConnInterface
	// Processors, when set, are the endpoints of the ext_proc cluster
	// (processor replicas) instead of Processor, picked round robin.
	Processors []grpc.ClientConnInterface
	// Logger receives debug logs of emulated decisions; nil discards them.
	Logger *slog.Logger
}

// Emulator serves HTTP/1.1 and h2c and drives the processor over ext_proc
// as Envoy does for Settings.
type Emulator struct {
	settings envoy.Settings
	client   *Client
	log      *slog.Logger
	// cors holds the CORS policies of the client's routes (Envoy's CORS
	// filter before ext_proc).
	cors map[*envoy.Route]*corsPolicy
}

// New checks the settings and returns an emulator. Settings the emulator
// does not emulate are refused with an error naming each of them.
func New(opts Options) (*Emulator, error) {
	endpoints := opts.Processors
	if len(endpoints) == 0 {
		endpoints = []grpc.ClientConnInterface{opts.Processor}
	}
	c, err := NewClusterClient(opts.Settings, endpoints, opts.Logger)
	if err != nil {
		return nil, err
	}
	cors, err := compileCORS(c.settings.Routes)
	if err != nil {
		return nil, err
	}
	return &Emulator{settings: opts.Settings, client: c, log: c.log, cors: cors}, nil
}

// Client returns the ext_proc client side the emulator uses.
func (e *Emulator) Client() *Client { return e.client }

// Validate reports every setting the emulator does not emulate.
func Validate(s envoy.Settings) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	ep := s.ExtProc
	mode := func(field, got string, allowed ...string) {
		for _, a := range allowed {
			if got == a {
				return
			}
		}
		bad("ext_proc processing_mode.%s %q is not emulated (want %q)", field, got, allowed[0])
	}
	mode("request_header_mode", ep.RequestHeaderMode, "SEND", "DEFAULT", "")
	mode("request_body_mode", ep.RequestBodyMode, "FULL_DUPLEX_STREAMED")
	if ep.RequestBodyMode == "FULL_DUPLEX_STREAMED" && ep.RequestTrailerMode != "SEND" {
		// [rule fds-needs-trailer-send] Envoy refuses a filter with a
		// FULL_DUPLEX_STREAMED request body and request_trailer_mode not SEND.
		// source: source/extensions/filters/http/ext_proc/config.cc verifyProcessingModeConfig
		// envoy-test: HttpExtProcConfigTest.InvalidFullDuplexStreamedConfig
		// ours: TestNewRefusesSettingsItDoesNotEmulate
		bad("ext_proc: if the request_body_mode is FULL_DUPLEX_STREAMED, then the request_trailer_mode has to be SEND (got %q)", ep.RequestTrailerMode)
	}
	mode("response_header_mode", ep.ResponseHeaderMode, "SKIP")
	mode("response_body_mode", ep.ResponseBodyMode, "NONE", "")
	mode("response_trailer_mode", ep.ResponseTrailerMode, "SKIP", "DEFAULT", "")
	if ep.FailureModeAllow {
		bad("ext_proc failure_mode_allow true is not emulated")
	}
	if ep.StatusOnError != 0 && (ep.StatusOnError < 400 || ep.StatusOnError > 599) {
		bad("ext_proc status_on_error %d: only 4xx and 5xx are allowed", ep.StatusOnError)
	}
	if ep.ClusterName == "" {
		bad("ext_proc grpc_service.envoy_grpc.cluster_name is empty")
	}
	switch s.CodecType {
	case "", "AUTO", "HTTP1", "HTTP2":
	default:
		bad("HCM codec_type %q is not emulated", s.CodecType)
	}
	if s.RequestTimeout != 0 {
		bad("HCM request_timeout %v is not emulated", s.RequestTimeout)
	}
	if s.StreamIdleTimeout < 0 {
		bad("HCM stream_idle_timeout %v is negative", s.StreamIdleTimeout)
	}
	for i, r := range s.Routes {
		errs = append(errs, routeErrors(i, r)...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("emulator: settings not emulated: %w", errors.Join(errs...))
	}
	return nil
}

// routeErrors reports what the emulator cannot do with route i.
func routeErrors(i int, r envoy.Route) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	name := fmt.Sprintf("route %d (%q)", i, r.Name)
	if (r.Prefix == "") == (r.Path == "") {
		bad("%s: exactly one of prefix and path must be set", name)
	}
	if (r.DirectResponseStatus != 0) == (r.Cluster != "") {
		bad("%s: exactly one of direct_response and a cluster must be set", name)
	}
	if r.DirectResponseStatus != 0 && (r.DirectResponseStatus < 100 || r.DirectResponseStatus > 599) {
		bad("%s: direct_response status %d out of range", name, r.DirectResponseStatus)
	}
	if r.IdleTimeout < 0 || r.Timeout < 0 {
		bad("%s: negative timeout", name)
	}
	return errs
}

// Handler returns the HTTP handler. It serves HTTP/1.1 and, on a server
// that enables unencrypted HTTP/2 (http.Server.Protocols, as Serve does),
// prior-knowledge h2c.
func (e *Emulator) Handler() http.Handler { return http.HandlerFunc(e.serveHTTP) }

// Serve serves HTTP/1.1 and prior-knowledge h2c on ln until ctx is done.
func (e *Emulator) Serve(ctx context.Context, ln net.Listener) error {
	// codec_type AUTO serves both; HTTP2 without TLS is prior-knowledge
	// h2c. net/http does not implement the h2c Upgrade dance, and neither
	// does Envoy, which strips `Upgrade: h2c`.
	var p http.Protocols
	p.SetHTTP1(e.settings.CodecType != "HTTP2")
	p.SetUnencryptedHTTP2(e.settings.CodecType != "HTTP1")
	srv := &http.Server{
		Handler:   e.Handler(),
		Protocols: &p,
		// The handler applies max_request_headers_kb as Envoy counts it;
		// net/http's own limit (which counts differently and answers 431
		// on HTTP/2 too) only backs it up far above.
		MaxHeaderBytes: 4*e.headerLimit() + 64<<10,
		ErrorLog:       slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
		BaseContext:    func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("emulator: serve: %w", err)
	case <-ctx.Done():
		// A development tool: close at once rather than drain.
		_ = srv.Close()
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("emulator: serve: %w", err)
		}
		return nil
	}
}

// headerLimit is max_request_headers_kb in bytes.
func (e *Emulator) headerLimit() int {
	kb := e.settings.MaxRequestHeadersKB
	if kb == 0 {
		kb = 60 // Envoy's default max_request_headers_kb
	}
	return kb * 1024
}
