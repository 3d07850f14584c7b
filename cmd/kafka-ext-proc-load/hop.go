package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
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
	served
}

// hopAnswer is what the hop does for one path: worker's raw work, then
// answer.
type hopAnswer struct {
	worker int
	answer []*extprocv3.ProcessingResponse
}

func startHop(do func(ctx context.Context, i int) error, answers map[string]hopAnswer) (*hop, error) {
	h := &hop{do: do, answers: answers}
	var err error
	h.served, err = serve("hop baseline", func(s grpc.ServiceRegistrar) { extprocv3.RegisterExternalProcessorServer(s, h) })
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Process answers one of the scenario's POSTs with its worker's raw work.
func (h *hop) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	headers, err := readRequest(stream)
	if err != nil {
		return nil
	}
	path := pathOf(headers)
	a, ok := h.answers[path]
	if !ok {
		return status.Errorf(codes.InvalidArgument, "the hop baseline answers the scenario's POSTs, not %q", path)
	}
	if err := h.do(stream.Context(), a.worker); err != nil {
		return status.Errorf(codes.Unavailable, "the raw work: %v", err)
	}
	answerAndEnd(stream, a.answer)
	return nil
}

// measureWithHop measures the gateway (reqs through the processor), the
// raw side, and the raw side behind the hop baseline and behind the
// machinery baseline (measureRR; sides 0, 1, 2, 3). First the gateway and
// the raw side must answer (the processor answers 503 until its reply
// index has caught up, a raw consumer must have its assignment); with
// -raw-headers gateway, *headers gets the processor's record headers read
// back from topic; then the processor's answers are captured for the hop
// and the machinery baseline to replay.
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
	mb, err := startMachinery(e.log.With("component", "machinery baseline"), o.limits, raw.do, answers)
	if err != nil {
		return nil, err
	}
	defer mb.stop()
	if err := e.checkMachinery(ctx, mb.addr(), reqs[0], answers[reqs[0].path].answer); err != nil {
		return nil, err
	}
	mbSide, err := e.dial("machinery baseline", mb.addr(), o.conns)
	if err != nil {
		return nil, err
	}
	defer mbSide.close()
	ms := e.gatewayRR(mbSide, reqs)
	ms.name = "raw + the processor's exchange machinery"
	return e.measureRR(ctx, o, scenario, []rrSide{gw, raw, hs, ms})
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

// machinery is the third baseline of the request-reply and oneway
// scenarios: the hop's raw work behind the processor's own exchange
// machinery instead of the hop's bare ext_proc server. It is a
// processor.Server built from the gateway's configuration and served with
// the same gRPC options: it matches each POST to its route, reads the body
// and answers through the processor's writer, ends the stream with the
// answer, keeps its metrics and logs as the gateway does; only the route's
// capability handler is replaced by one that runs the raw work for the
// worker the path names and returns the processor's answer for it (checked
// byte for byte before the rounds, see checkMachinery). So gateway ÷
// machinery isolates the route's own work (for request-reply: the record's
// headers and correlation id, the flight table, the processor's producer, the
// reply index) and machinery ÷ hop is the most gateway ÷ hop can reach with
// the exchange machinery as it is.
//
// It runs in the client process, as the hop does.
type machinery struct {
	served
}

// machineryHandler is the capability handler of the machinery baseline.
type machineryHandler struct {
	do      func(ctx context.Context, i int) error
	answers map[string]machineryAnswer // by path; read-only once serving
}

type machineryAnswer struct {
	worker int
	resp   *handler.HTTPResponse
}

func (h *machineryHandler) HandleHTTP(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
	a, ok := h.answers[req.Path]
	if !ok {
		return handler.ProblemResponse(http.StatusBadRequest, "the machinery baseline answers the scenario's POSTs, not "+req.Path)
	}
	if err := h.do(ctx, a.worker); err != nil {
		return handler.ProblemResponse(http.StatusServiceUnavailable, "the raw work: "+err.Error())
	}
	return a.resp
}

func (h *machineryHandler) HandleGRPC(context.Context, *handler.GRPCCall) handler.Status {
	return handler.Status{Code: codes.Unimplemented, Message: "the machinery baseline serves the scenario's HTTP routes only"}
}

// startMachinery serves the processor's exchange machinery with the bench
// configuration (-limits included) in front of do; answers are the
// processor's, as captured for the hop.
func startMachinery(logger *slog.Logger, limits string, do func(ctx context.Context, i int) error, answers map[string]hopAnswer) (*machinery, error) {
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Parse("bench.yaml", []byte(benchConfig(true, limits)), noEnv)
	if err != nil {
		return nil, fmt.Errorf("the machinery baseline's configuration: %w", err)
	}
	h := &machineryHandler{do: do, answers: make(map[string]machineryAnswer, len(answers))}
	for path, a := range answers {
		resp, err := httpResponseOf(a.answer)
		if err != nil {
			return nil, fmt.Errorf("the processor's answer to %s: %w", path, err)
		}
		h.answers[path] = machineryAnswer{worker: a.worker, resp: resp}
	}
	ps, err := processor.New(processor.Options{Config: cfg, Logger: logger, HTTP: h, GRPC: h})
	if err != nil {
		return nil, fmt.Errorf("the machinery baseline: %w", err)
	}
	sv, err := serve("machinery baseline", ps.Register)
	if err != nil {
		return nil, err
	}
	return &machinery{served: sv}, nil
}

// httpResponseOf turns the processor's answer (one ImmediateResponse) back
// into the handler's response it was written from; the processor's writer
// then sends the same bytes again.
func httpResponseOf(answer []*extprocv3.ProcessingResponse) (*handler.HTTPResponse, error) {
	if len(answer) != 1 || answer[0].GetImmediateResponse() == nil {
		return nil, fmt.Errorf("%d messages, want one ImmediateResponse", len(answer))
	}
	ir := answer[0].GetImmediateResponse()
	resp := &handler.HTTPResponse{Status: int(ir.GetStatus().GetCode()), Body: ir.GetBody()}
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		resp.Headers = append(resp.Headers, route.Header{Name: o.GetHeader().GetKey(), Value: string(o.GetHeader().GetRawValue())})
	}
	return resp, nil
}

// checkMachinery sends r once through the machinery baseline at addr and
// checks that its answer is the processor's, message for message.
func (e *env) checkMachinery(ctx context.Context, addr string, r replyRequest, want []*extprocv3.ProcessingResponse) error {
	rec := &recorder{}
	s, err := e.dial("machinery baseline (check)", addr, 1, grpc.WithStreamInterceptor(rec.interceptor()))
	if err != nil {
		return err
	}
	defer s.close()
	req := newRequestWith(s.client(0), "POST", r.path, false, "content-type", "application/json", "content-length", strconv.Itoa(len(r.body)))
	rep, err := exchangeBody(ctx, s.client(0), req, r.body)
	if err == nil {
		err = r.check(rep)
	}
	if err != nil {
		return fmt.Errorf("the machinery baseline: %w", err)
	}
	got := rec.take()
	if len(got) != len(want) {
		return fmt.Errorf("the machinery baseline sent %d messages, the processor %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			return fmt.Errorf("the machinery baseline's answer to %s differs from the processor's: %v, want %v", r.path, got[i], want[i])
		}
	}
	return nil
}

// addMachineryRatios adds the machinery baseline's ratios at
// replyConcurrency in flight, the same in both scenarios that have it. The
// CPU ratios are inverted (baseline ÷ subject), so that on saturated cores
// each tends to its rate ratio while moving less between runs.
func addMachineryRatios(res *Result, gateway, hop, mach rrFigures) {
	res.ratio("machinery_own_ratio", ratio(gateway.PerSecond, mach.PerSecond),
		"requests per second, gateway ÷ machinery baseline: what the route's own work leaves (1 if it cost no more than the raw work)", "")
	res.ratio("machinery_ceiling_ratio", ratio(mach.PerSecond, hop.PerSecond),
		"requests per second, machinery baseline ÷ hop baseline: the most gateway ÷ hop can reach with the exchange machinery as it is", "")
	res.ratio("machinery_own_cpu_ratio", ratio(mach.All.CPUus, gateway.All.CPUus), "CPU per request, machinery baseline ÷ gateway", "")
	res.ratio("machinery_ceiling_cpu_ratio", ratio(hop.All.CPUus, mach.All.CPUus), "CPU per request, hop baseline ÷ machinery baseline", "")
}
