package main

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// hop is the request-reply scenario's second baseline, the raw round trip
// behind an ext_proc hop: an ext_proc server with the processor's gRPC
// plumbing (stack.GRPCServerOptions) that reads each POST to its end, runs
// the raw librdkafka work (rawRR.roundTrip; for the oneway scenario
// rawOneway.produce) for the worker whose request the path names, and
// answers with the ProcessingResponses the processor sent for that request. The same bytes cross the ext_proc stream
// as through the gateway and the same Kafka work is done as by the raw loop;
// what the processor does besides is all that is left out. A gateway that
// cost nothing of its own would match it, so gateway ÷ hop is the processor's
// share and hop ÷ raw what the hop alone costs on this machine.
//
// It runs in the client process, also with -split, beside the raw loop it
// calls.
type hop struct {
	extprocv3.UnimplementedExternalProcessorServer
	do      func(ctx context.Context, i int) error // worker i's raw work
	answers map[string]hopAnswer                   // by :path; read-only once serving

	srv  *grpc.Server
	lis  net.Listener
	done chan struct{}
}

// hopAnswer is what the hop does for one path: worker's raw work, then
// answer.
type hopAnswer struct {
	worker int
	answer []*extprocv3.ProcessingResponse
}

func startHop(do func(ctx context.Context, i int) error, answers map[string]hopAnswer) (*hop, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the hop baseline: %w", err)
	}
	h := &hop{do: do, answers: answers, srv: grpc.NewServer(stack.GRPCServerOptions(nil)...), lis: lis, done: make(chan struct{})}
	extprocv3.RegisterExternalProcessorServer(h.srv, h)
	go func() {
		defer close(h.done)
		_ = h.srv.Serve(lis) // returns nil after Stop
	}()
	return h, nil
}

func (h *hop) addr() string { return h.lis.Addr().String() }

func (h *hop) stop() {
	h.srv.Stop()
	<-h.done
}

// Process answers one of the scenario's POSTs with its worker's raw work.
func (h *hop) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	headers, err := readRequest(stream)
	if err != nil {
		return nil
	}
	var path string
	for _, hv := range headers.GetHeaders().GetHeaders() {
		if hv.GetKey() == ":path" {
			path = string(hv.GetRawValue())
			break
		}
	}
	a, ok := h.answers[path]
	if !ok {
		return status.Errorf(codes.InvalidArgument, "the hop baseline answers the scenario's POSTs, not %q", path)
	}
	if err := h.do(stream.Context(), a.worker); err != nil {
		return status.Errorf(codes.Unavailable, "the raw work: %v", err)
	}
	answerAndLinger(stream, a.answer)
	return nil
}

// measureWithHop measures the gateway (reqs through the processor), the
// raw side and the raw side behind the hop baseline (measureRR; sides 0,
// 1, 2). First the gateway and the raw side must answer (the processor
// answers 503 until its reply index has caught up, a raw consumer must
// have its assignment); with -raw-headers gateway, *headers gets the
// processor's record headers read back from topic; then the processor's
// answers are captured for the hop to replay.
func (e *env) measureWithHop(ctx context.Context, o *options, scenario, topic string, reqs []replyRequest, raw rrSide, headers *[]kafka.Header) (func(li, si int) rrFigures, error) {
	gw := e.gatewayRR(e.procSide, reqs)
	for _, s := range []rrSide{gw, raw} {
		if err := awaitRR(ctx, s); err != nil {
			return nil, err
		}
	}
	var err error
	if *headers, err = e.captureWithHeaders(ctx, o, topic, reqs); err != nil {
		return nil, err
	}
	answers, err := e.captureReplies(ctx, reqs)
	if err != nil {
		return nil, err
	}
	hb, err := startHop(raw.do, answers)
	if err != nil {
		return nil, err
	}
	defer hb.stop()
	hopSide, err := e.dial("hop baseline", hb.addr(), o.conns)
	if err != nil {
		return nil, err
	}
	defer hopSide.close()
	hs := e.gatewayRR(hopSide, reqs)
	hs.name = "raw + ext_proc hop"
	if err := awaitRR(ctx, hs); err != nil {
		return nil, err
	}
	return e.measureRR(ctx, o, scenario, []rrSide{gw, raw, hs})
}

// captureReplies records the processor's answer to each request, for the hop
// baseline to replay (201 with the responder's reply, or 204), worker i's
// to reqs[i].
func (e *env) captureReplies(ctx context.Context, reqs []replyRequest) (map[string]hopAnswer, error) {
	c := e.procSide.client(0)
	out := make(map[string]hopAnswer, len(reqs))
	for i, r := range reqs {
		req := newRequestWith(c, "POST", r.path, false, "content-type", "application/json", "content-length", strconv.Itoa(len(r.body)))
		answer, _, err := e.capture(ctx, req, r.body, r.check)
		if err != nil {
			return nil, err
		}
		out[r.path] = hopAnswer{worker: i, answer: answer}
	}
	return out, nil
}
