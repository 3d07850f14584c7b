package emulator

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The rules below were settled against Envoy's source after the emulator
// had them wrong; each test names the Envoy function it reproduces.

// ProcessorState::handleTrailersResponse: in FULL_DUPLEX_STREAMED a
// request_trailers reply before the header reply continues the request,
// unmodified, to its route and closes the ext_proc stream (no Envoy test
// sends trailers first).
func TestTrailersReplyBeforeHeaderReply(t *testing.T) {
	trailersReply := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	p := startProcessor(t, func(ps *procStream) error {
		ps.next()
		if err := ps.send(trailersReply); err != nil {
			return nil
		}
		<-ps.ctx.Done()
		return nil
	})
	addr := startEmulator(t, baseSettings(), p.addr)
	if code, h, body := get(t, addr); code != 503 || body != "no answer from kafka-ext-proc\n" || h.Get("Content-Type") != "text/plain" {
		t.Errorf("HTTP: %d %q, want the route's direct_response", code, body)
	}
	if !p.stream(t).cancelled() {
		t.Error("Process stream not closed after the trailers reply")
	}
	if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unavailable || st.Message() != "no healthy upstream" {
		t.Errorf("gRPC: %v %q, want the route's no healthy upstream", st.Code(), st.Message())
	}
}
