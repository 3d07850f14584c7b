// Package emulator is a local stand-in for Envoy's HTTP connection manager
// and ext_proc filter, for `dev`, end-to-end tests and load generation.
//
// It is a development tool, never a production front: it emulates only the
// behaviour our envoy/envoy.yaml configures (request headers SEND, request
// body FULL_DUPLEX_STREAMED, request trailers SEND, response processing
// skipped, fail-closed) and New refuses any other settings. A CORS filter
// placed before ext_proc is applied as Envoy's is (cors.go): preflights on
// routes with a CORS policy are answered before the processor sees them.
//
// # API
//
//   - New(Options{Settings, Processor, Logger}) builds an Emulator;
//     Emulator.Serve(ctx, ln) serves HTTP/1.1 and prior-knowledge h2c on one
//     listener (real net/http and grpc-go clients work); Emulator.Handler is
//     the bare handler (h2c needs a server with unencrypted HTTP/2 enabled).
//   - The ext_proc client side has no HTTP dependency: NewClient,
//     Client.Route, Client.Start(ctx, Request) -> *Exchange, then
//     Exchange.Body/Trailers (request data as it arrives), Exchange.Next
//     (what the filter does downstream: LocalReply, Continue, streamed
//     Headers/Body/Trailers, Reset) and Exchange.Close (the RST-style cancel
//     of the Process stream). DownstreamHeaders builds a Request's headers
//     from an *http.Request as the HCM does.
//
// The emulated rules were read in Envoy's source (a 1.39.0-dev tree), and
// its comment says where it was verified: [code] in Envoy's C++ source,
// [test] in an Envoy test, [api] in the API's proto documentation. The
// rules a processor's behaviour depends on carry a mark of four comment
// lines, "[rule id] what Envoy does", "source: file Function",
// "envoy-test: Envoy's test or none" and "ours: our test";
// docs/envoy-fidelity.md is generated from those marks and a test keeps
// it in step. What is assumed rather than read in Envoy is marked
// UNVERIFIED with the reason; a processor must never depend on it.
//
// # Not emulated
//
// Envoy's order of request headers: pseudo-headers first, then the others
// in arrival order (source/common/http/header_map_impl.h
// HeaderMapImpl::HeaderList::insert), which net/http does not keep (keys
// are sorted here; the processor keeps whatever order it gets); attributes and
// forwarded dynamic metadata (metadata_context is always empty: there is no
// jwt_authn); use_remote_address and XFF handling; x-envoy-* request header
// sanitising; HCM local_reply_config; header count/size limits on mutations;
// max_request_headers_count; HTTP/1 enable_trailers; downstream HTTP/2
// keepalive; upstreams (a cluster route always answers "no healthy
// upstream"); health checks and outlier detection of the ext_proc cluster
// (an endpoint that is down keeps its round-robin turn); ext_proc's async-client headers on the Process stream
// (x-forwarded-for, timeouts); the bytes after an HTTP/1 CONNECT (the
// tunnel) are not passed on as request body; inline headers that
// extensions register in an Envoy build are not joined. net/http delivers
// the end of an HTTP/2 request body as a separate empty chunk where Envoy
// may flag the last data chunk, shows request trailers only when the
// client declared them, and answers request headers far (4x) above
// max_request_headers_kb with its own 431. Resets are
// RST_STREAM(INTERNAL_ERROR), Envoy's code since 1.37 for a response not
// ended, and RST_STREAM(NO_ERROR) after a complete response. Tracing (trace.go)
// is emulated only as far as the processor sees it: with the OpenTelemetry
// tracer, the context of the ext_proc span on the Process stream; Envoy's
// own spans are not exported, other tracing providers and sampling settings
// are refused (envoy.SettingsFrom), and x-client-trace-id is ignored.
package emulator
