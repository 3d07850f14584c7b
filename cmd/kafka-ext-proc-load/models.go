package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// scenarioModels measures what topic models cost (BENCHMARKS.md): a
// produce whose body is checked against a JSON Schema, and a fetch of a
// view converted from Avro, each against the same route without a model,
// on one processor, in one run, alternating rounds. CPU per request is the
// figure: targets ≤ 1.10 × for the validated produce and ≤ 1.02 × for the
// converted fetch (the conversion happens once per record, at ingest).
const scenarioModels = "models"

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

// modelsResult is the outcome of the models scenario.
type modelsResult struct {
	Scenario string `json:"scenario"`
	Clients  int    `json:"clients"`
	Conns    int    `json:"conns"`
	Rounds   int    `json:"rounds"`
	Duration string `json:"duration"`

	Produce      rate    `json:"produce_plain"`
	ProduceModel rate    `json:"produce_validated"`
	ProduceRatio float64 `json:"produce_cpu_ratio"`
	Fetch        rate    `json:"fetch_plain"`
	FetchModel   rate    `json:"fetch_converted"`
	FetchRatio   float64 `json:"fetch_cpu_ratio"`
	TargetProd   float64 `json:"target_produce_cpu_ratio"`
	TargetFetch  float64 `json:"target_fetch_cpu_ratio"`
}

func (modelsResult) isResult() {}

// runModels starts a broker and a processor of its own (the scenario's
// routes need topic models, which a kafka binding gets at start) in this
// process, so it measures every process's CPU; -split is not supported.
func runModels(ctx context.Context, e *env, o *options) (result, error) {
	if e.split {
		return nil, errors.New("runs in one process: leave -split out")
	}
	cfg, err := config.Parse("models-bench.yaml", []byte(modelsConfigYAML), nil)
	if err != nil {
		return nil, fmt.Errorf("the built-in configuration: %w", err)
	}
	topics := []embedded.Topic{{Name: "bench-plain"}, {Name: "bench-checked"}, {Name: "bench-json", Compact: true}, {Name: "bench-avro", Compact: true}}
	broker, err := embedded.Start(embedded.Options{Addr: "127.0.0.1:0", Topics: topics, Logger: e.log.With("component", "kafka")})
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

	res := modelsResult{Scenario: scenarioModels, Clients: o.clients, Conns: o.conns, Rounds: o.rounds, Duration: o.duration.String(),
		TargetProd: 1.10, TargetFetch: 1.02}
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
		out          [2]*rate
		ratio        *float64
	}{
		{produce("/plain/o-1"), produce("/checked/o-1"), want204, [2]*rate{&res.Produce, &res.ProduceModel}, &res.ProduceRatio},
		{fetch("/json/o-1"), fetch("/avro/o-1"), want200, [2]*rate{&res.Fetch, &res.FetchModel}, &res.FetchRatio},
	} {
		reqs := [2]bodyRequest{pair.plain, pair.model}
		for _, r := range reqs {
			if r.body == nil { // a fetch: wait for the view to hold the record
				if err := awaitOn(ctx, s, r.req, pair.check); err != nil {
					return nil, err
				}
			}
			if _, err := loadBody(ctx, s, o.clients, o.warmup, o.maxReqs, r, pair.check); err != nil {
				return nil, err
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
				w, err := loadBody(ctx, s, o.clients, o.duration, o.maxReqs, reqs[i], pair.check)
				if err != nil {
					return nil, err
				}
				totals[i].add(w)
				perRound[i] = append(perRound[i], float64(w.requests)/w.elapsed.Seconds())
			}
		}
		for i, t := range totals {
			if t.errors > 0 || t.requests == 0 {
				return nil, fmt.Errorf("%d answered, %d failed; first failure: %v", t.requests, t.errors, t.firstErr)
			}
			*pair.out[i] = rateOf(t, perRound[i], false)
		}
		*pair.ratio = ratio(pair.out[1].All.CPUus, pair.out[0].All.CPUus)
	}
	return res, nil
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

func reportModels(b *strings.Builder, r modelsResult) {
	fmt.Fprintf(b, "%s: %d clients over %d ext_proc connections, %d round(s) of %s per route, one processor\n",
		r.Scenario, r.Clients, r.Conns, r.Rounds, r.Duration)
	for _, s := range []struct {
		name string
		r    rate
	}{{"produce, no model", r.Produce}, {"produce, JSON Schema", r.ProduceModel}, {"fetch, JSON", r.Fetch}, {"fetch, Avro as JSON", r.FetchModel}} {
		fmt.Fprintf(b, "  %-20s %8.0f req/s  %6.1f allocs/req %6.1f µs CPU/req (all processes)\n", s.name, s.r.PerSecond, s.r.All.Allocs, s.r.All.CPUus)
	}
	fmt.Fprintf(b, "  ratio     validated produce CPU %.2f × (target ≤ %.2f); converted fetch CPU %.2f × (target ≤ %.2f)\n",
		r.ProduceRatio, r.TargetProd, r.FetchRatio, r.TargetFetch)
}
