package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Oneway produce: POST /events/{id} through the processor's produce route
// without reply-to (acks leader_only; answered 204 once the broker
// acknowledged the record), against the raw librdkafka write with the same
// producer settings (produce, then wait for the delivery report) and
// against that raw write behind an ext_proc hop (hop), all in one run.
// Gateway ÷ hop at replyConcurrency in flight is the processor's own share.

// onewayResult is the outcome of the produce-oneway scenario.
type onewayResult struct {
	Scenario    string `json:"scenario"`
	Split       bool   `json:"split"`
	Conns       int    `json:"conns"`
	Rounds      int    `json:"rounds"`
	Duration    string `json:"duration_per_round"`
	BodyBytes   int    `json:"body_bytes"`
	Concurrency int    `json:"concurrency"`
	// Gateway is POST /events/{id} through the processor, Raw the
	// librdkafka write, Hop the raw write behind an ext_proc hop; One is
	// one request in flight, Many Concurrency.
	GatewayOne  rrFigures `json:"gateway_1"`
	RawOne      rrFigures `json:"raw_1"`
	HopOne      rrFigures `json:"hop_1"`
	GatewayMany rrFigures `json:"gateway_n"`
	RawMany     rrFigures `json:"raw_n"`
	HopMany     rrFigures `json:"hop_n"`
	// Machinery is the raw write behind the processor's exchange machinery
	// (see machinery).
	MachineryOne  rrFigures `json:"machinery_1"`
	MachineryMany rrFigures `json:"machinery_n"`
	machineryRatios
	// HopRateRatio is the gateway's rate ÷ the hop baseline's with
	// Concurrency in flight (target ≥ TargetHopRate); HopCeilingRatio the
	// hop's ÷ the raw write's, what the hop alone leaves on this machine.
	HopRateRatio    float64 `json:"hop_rate_ratio"`
	HopCeilingRatio float64 `json:"hop_ceiling_ratio"`
	RateRatio       float64 `json:"rate_ratio"`
	LatencyRatio    float64 `json:"latency_ratio"`     // gateway ÷ raw, median, one in flight
	HopLatencyRatio float64 `json:"hop_latency_ratio"` // gateway ÷ hop, median, one in flight
	// HopCPURatio is the gateway's CPU per request ÷ the hop's with
	// Concurrency in flight, over every process.
	HopCPURatio   float64 `json:"hop_cpu_ratio"`
	TargetHopRate float64 `json:"target_hop_rate_ratio"`
	RawHeaders    int     `json:"raw_headers"` // as requestReplyResult.RawHeaders

}

func (onewayResult) isResult() {}

// rawOneway is the raw librdkafka write of the oneway scenario: the shared
// producer of the request-reply scenario's raw loop (the processor's
// settings for acks leader_only), one delivery channel per worker.
type rawOneway struct {
	reqs     []replyRequest
	prod     *kafka.Producer
	delivery []chan kafka.Event
	headers  []kafka.Header // as rawRR.headers
}

func startRawOneway(broker string, reqs []replyRequest) (*rawOneway, error) {
	prod, err := newRawProducer(broker)
	if err != nil {
		return nil, err
	}
	r := &rawOneway{reqs: reqs, prod: prod, delivery: make([]chan kafka.Event, len(reqs))}
	for i := range r.delivery {
		r.delivery[i] = make(chan kafka.Event, 1)
	}
	return r, nil
}

func (r *rawOneway) close() { r.prod.Close() }

func (r *rawOneway) side() rrSide { return rrSide{name: "raw librdkafka", do: r.produce} }

// produce writes worker i's record as the processor writes it (key, body,
// content-type) and waits for its delivery report.
func (r *rawOneway) produce(ctx context.Context, i int) error {
	req := r.reqs[i%len(r.reqs)]
	delivery := r.delivery[i%len(r.delivery)]
	// Left over from a write abandoned on its context: not ours.
	select {
	case <-delivery:
	default:
	}
	topic := eventsTopic
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            []byte(req.id), Value: req.body,
		// The processor's oneway record carries content-type alone (and the
		// route's overrides, none here).
		Headers: []kafka.Header{{Key: "content-type", Value: []byte("application/json")}},
	}
	if r.headers != nil {
		m.Headers = withHeaders(r.headers, req.path, "", "")
	}
	if err := r.prod.Produce(m, delivery); err != nil {
		return fmt.Errorf("producing a record: %w", err)
	}
	select {
	case ev := <-delivery:
		if dm, ok := ev.(*kafka.Message); !ok || dm.TopicPartition.Error != nil {
			return fmt.Errorf("producing a record: %v", ev)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the delivery report: %w", ctx.Err())
	}
}

// newOnewayRequests builds n oneway requests: POST /events/o<i>, answered
// 204 with no body.
func newOnewayRequests(n, valueSize int) []replyRequest {
	out := make([]replyRequest, n)
	for i := range out {
		id := "o" + strconv.Itoa(i)
		out[i] = replyRequest{id: id, path: "/events/" + id, body: jsonValue(id, 1, valueSize), status: 204}
	}
	return out
}

// runProduceOneway measures the processor's oneway produce route against
// the raw librdkafka write and that write behind an ext_proc hop.
func runProduceOneway(ctx context.Context, e *env, o *options) (result, error) {
	reqs := newOnewayRequests(replyConcurrency, o.valueSize)
	if err := e.srv.moreRoutes(ctx); err != nil {
		return nil, err
	}
	raw, err := startRawOneway(e.srv.brokerAddr(), reqs)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	fig, err := e.measureWithHop(ctx, o, scenarioOneway, eventsTopic, reqs, raw.side(), &raw.headers)
	if err != nil {
		return nil, err
	}
	res := onewayResult{
		Scenario: scenarioOneway, Split: e.split, Conns: o.conns, Rounds: o.rounds, Duration: o.duration.String(),
		BodyBytes: len(reqs[0].body), Concurrency: replyConcurrency,
		GatewayOne: fig(0, 0), RawOne: fig(0, 1), HopOne: fig(0, 2),
		GatewayMany: fig(1, 0), RawMany: fig(1, 1), HopMany: fig(1, 2),
		MachineryOne: fig(0, 3), MachineryMany: fig(1, 3),
		TargetHopRate: 0.9,
	}
	res.machineryRatios = newMachineryRatios(res.GatewayMany, res.HopMany, res.MachineryMany)
	res.RawHeaders = rawHeaderCount(raw.headers, 1)
	res.HopRateRatio = ratio(res.GatewayMany.PerSecond, res.HopMany.PerSecond)
	res.HopCeilingRatio = ratio(res.HopMany.PerSecond, res.RawMany.PerSecond)
	res.RateRatio = ratio(res.GatewayMany.PerSecond, res.RawMany.PerSecond)
	res.LatencyRatio = ratio(res.GatewayOne.Latency.P50Ms, res.RawOne.Latency.P50Ms)
	res.HopLatencyRatio = ratio(res.GatewayOne.Latency.P50Ms, res.HopOne.Latency.P50Ms)
	res.HopCPURatio = ratio(res.GatewayMany.All.CPUus, res.HopMany.All.CPUus)
	return res, nil
}
