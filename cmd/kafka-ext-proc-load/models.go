package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// The models scenario measures what topic models cost: a
// produce whose body is checked against a JSON Schema, and a fetch of a
// view converted from Avro, each against the same route without a model,
// on one processor, in one run, alternating rounds. CPU per request is the
// figure: targets ≤ 1.10 × for the validated produce and ≤ 1.02 × for the
// converted fetch (the conversion happens once per record, at ingest).

// orderSchema and orderAvro describe the body both sides send and read: a
// 141-byte order, as in the models reference's measurements.
const (
	orderSchema = `{"type":"object","required":["id","item","qty"],"additionalProperties":false,` +
		`"properties":{"id":{"type":"string","maxLength":64},"item":{"type":"string"},"qty":{"type":"integer","minimum":1},"note":{"type":"string"}}}`
	orderAvro = `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"},{"name":"item","type":"string"},` +
		`{"name":"qty","type":"int"},{"name":"note","type":"string"}]}`
	orderBody = `{"id":"o-1","item":"fountain pen, medium nib","qty":2,"note":"gift wrap, deliver to reception desk before noon"}`
)

const modelsConfigYAML = `
catalogs:
  inline0:
    type: inline
    options:
      subjects:
        order: { schema: '` + orderSchema + `' }
        order-avro: { schema: '` + orderAvro + `' }
bindings:
  kafka0:
    type: kafka
    kind: client
    options:
      bootstrap.servers: "127.0.0.1:9092"
      topics:
        - name: bench-checked
          value: { model: json, catalog: { inline0: [{ subject: order }] } }
        - name: bench-avro
          value: { model: avro, view: json, catalog: { inline0: [{ subject: order-avro }] } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: PUT, path: "/plain/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: bench-plain, acks: leader_only, key: "${params.id}" }
      - when: [{ method: PUT, path: "/checked/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: bench-checked, acks: leader_only, key: "${params.id}" }
      - when: [{ method: GET, path: "/json/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: bench-json, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/avro/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: bench-avro, filters: [{ key: "${params.id}" }] }
`

// runModels starts a broker and a processor of its own (the scenario's
// routes need topic models, which a kafka binding gets at start) in this
// process, so it measures every process's CPU; -split is not supported.
func runModels(ctx context.Context, e *env, o *options) (*Result, error) {
	if e.split {
		return nil, errors.New("runs in one process: leave -split out")
	}
	cfg, err := config.Parse("models-bench.yaml", []byte(modelsConfigYAML), nil)
	if err != nil {
		return nil, fmt.Errorf("the built-in configuration: %w", err)
	}
	broker, err := startBroker(e.log.With("component", "kafka"),
		brokerTopic{Name: "bench-plain"}, brokerTopic{Name: "bench-checked"}, brokerTopic{Name: "bench-json", Compact: true}, brokerTopic{Name: "bench-avro", Compact: true})
	if err != nil {
		return nil, err
	}
	defer broker.Close()
	cfg = stack.PointAt(cfg, broker.Addr())
	proc, err := stack.StartProcessor(stack.ProcessorOptions{Config: cfg, Listen: "127.0.0.1:0", Logger: e.log.With("component", "processor")})
	if err != nil {
		return nil, err
	}
	defer proc.Shutdown(context.WithoutCancel(ctx))
	if err := putOrders(broker.Addr()); err != nil {
		return nil, err
	}
	s, err := e.dial("processor (models)", proc.Addr(), o.conns)
	if err != nil {
		return nil, err
	}
	defer s.close()

	res := newResult(scenarioModels, false)
	res.param("clients", o.clients)
	res.param("conns", o.conns)
	res.param("rounds", o.rounds)
	res.param("duration", o.duration.String())
	produce := func(path string) bodyRequest {
		return bodyRequest{newRequestWith(s.client(0), http.MethodPut, path, false, "content-type", "application/json"), []byte(orderBody)}
	}
	fetch := func(path string) bodyRequest { return bodyRequest{req: newRequest(s.client(0), path)} }
	want204 := func(r reply) error {
		if r.status != http.StatusNoContent {
			return fmt.Errorf("produce: %d %s, want 204", r.status, r.body)
		}
		return nil
	}
	want200 := func(r reply) error {
		if r.status != http.StatusOK || len(r.body) != len(orderBody) {
			return fmt.Errorf("fetch: %d %q, want 200 with the order", r.status, r.body)
		}
		return nil
	}
	for _, pair := range []struct {
		plain, model bodyRequest
		check        func(reply) error
		names        [2]string // of the figures
		ratio        string
		of, target   string
	}{
		{produce("/plain/o-1"), produce("/checked/o-1"), want204, [2]string{"produce_plain", "produce_validated"},
			"produce_cpu_ratio", "CPU per request, validated produce ÷ plain produce", "≤ 1.10"},
		{fetch("/json/o-1"), fetch("/avro/o-1"), want200, [2]string{"fetch_plain", "fetch_converted"},
			"fetch_cpu_ratio", "CPU per request, fetch converted from Avro ÷ plain fetch", "≤ 1.02"},
	} {
		plain, model, err := measurePair(ctx, o, s, [2]bodyRequest{pair.plain, pair.model}, pair.check)
		if err != nil {
			return nil, err
		}
		res.figures(pair.names[0], plain)
		res.figures(pair.names[1], model)
		res.ratio(pair.ratio, ratio(model.All.CPUus, plain.All.CPUus), pair.of, pair.target)
	}
	return res, nil
}

// measurePair warms both requests up, then runs o.rounds rounds of each,
// alternating which goes first, every answer checked.
func measurePair(ctx context.Context, o *options, s *side, reqs [2]bodyRequest, check func(reply) error) (_, _ rate, err error) {
	for _, r := range reqs {
		if r.body == nil { // a fetch: wait for the view to hold the record
			if err := awaitOn(ctx, s, r.req, check); err != nil {
				return rate{}, rate{}, err
			}
		}
		if _, err := loadBody(ctx, s, o.clients, o.warmup, o.maxReqs, r, check); err != nil {
			return rate{}, rate{}, err
		}
	}
	var totals [2]window
	var perRound [2][]float64
	for round := range o.rounds {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			w, err := loadBody(ctx, s, o.clients, o.duration, o.maxReqs, reqs[i], check)
			if err != nil {
				return rate{}, rate{}, err
			}
			totals[i].add(w)
			perRound[i] = append(perRound[i], float64(w.requests)/w.elapsed.Seconds())
		}
	}
	for _, t := range totals {
		if t.errors > 0 || t.requests == 0 {
			return rate{}, rate{}, fmt.Errorf("%d answered, %d failed; first failure: %v", t.requests, t.errors, t.firstErr)
		}
	}
	return rateOf(totals[0], perRound[0], false), rateOf(totals[1], perRound[1], false), nil
}

// awaitOn polls (bounded) until s answers req as check wants: the view
// reads the records shortly after they are written.
func awaitOn(ctx context.Context, s *side, req emulator.Request, check func(reply) error) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		rep, err := exchange(ctx, s.client(0), req)
		if err == nil {
			if err = check(rep); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answered as expected in time: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// bodyRequest is a request and its body (nil: none).
type bodyRequest struct {
	req  emulator.Request
	body []byte
}

// loadBody is env.load for requests with a body: clients concurrent loops
// for d (or budget requests), tallied by check.
func loadBody(ctx context.Context, s *side, clients int, d time.Duration, budget int64, r bodyRequest, check func(reply) error) (window, error) {
	w := loops(ctx, s, clients, d, budget, func(ctx context.Context, c *emulator.Client) (reply, error) {
		return exchangeBody(ctx, c, r.req, r.body)
	}, check)
	return w, ctx.Err()
}

// putOrders writes the order both fetch routes read: as JSON to the plain
// topic, as Avro binary (unframed: an inline catalog) to the converted one.
func putOrders(addr string) error {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": addr, "linger.ms": 0, "log_level": 3})
	if err != nil {
		return err
	}
	defer p.Close()
	avro := avroOrder()
	for topic, value := range map[string][]byte{"bench-json": []byte(orderBody), "bench-avro": avro} {
		done := make(chan kafka.Event, 1)
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: []byte("o-1"), Value: value}, done); err != nil {
			return err
		}
		if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
			return m.TopicPartition.Error
		}
	}
	return nil
}

// avroOrder is orderBody in Avro binary: each string as its zigzag length
// and bytes, qty as a zigzag varint.
func avroOrder() []byte {
	var b []byte
	str := func(s string) {
		b = appendZigzag(b, int64(len(s)))
		b = append(b, s...)
	}
	str("o-1")
	str("fountain pen, medium nib")
	b = appendZigzag(b, 2)
	str("gift wrap, deliver to reception desk before noon")
	return b
}

func appendZigzag(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}
