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
func runProduceOneway(ctx context.Context, e *env, o *options) (*Result, error) {
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
	res := newRRResult(scenarioOneway, e, o, fig, len(reqs[0].body), rawHeaderCount(raw.headers, 1))
	gw1, raw1, hop1 := fig(0, rrGateway), fig(0, rrRaw), fig(0, rrHop)
	gwN, rawN, hopN := fig(1, rrGateway), fig(1, rrRaw), fig(1, rrHop)
	res.ratio("hop_rate_ratio", ratio(gwN.PerSecond, hopN.PerSecond), "requests per second with 64 in flight, gateway ÷ hop baseline: the processor's own share", "≥ 0.9")
	res.ratio("hop_ceiling_ratio", ratio(hopN.PerSecond, rawN.PerSecond),
		"requests per second with 64 in flight, hop baseline ÷ raw write: what the hop alone leaves on this machine", "")
	res.ratio("rate_ratio", ratio(gwN.PerSecond, rawN.PerSecond), "requests per second with 64 in flight, gateway ÷ raw write", "")
	res.ratio("latency_ratio", ratio(gw1.Latency.P50Ms, raw1.Latency.P50Ms), "median with 1 in flight, gateway ÷ raw write", "")
	res.ratio("hop_latency_ratio", ratio(gw1.Latency.P50Ms, hop1.Latency.P50Ms), "median with 1 in flight, gateway ÷ hop baseline", "")
	res.ratio("hop_cpu_ratio", ratio(gwN.All.CPUus, hopN.All.CPUus), "CPU per request with 64 in flight over every process, gateway ÷ hop baseline", "")
	addMachineryRatios(res, gwN, hopN, fig(1, rrMachinery))
	return res, nil
}
