package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const (
	orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"name","type":"string"},{"name":"qty","type":"int"},{"name":"note","type":["null","string"],"default":null}]}`
	eventProto = "syntax = \"proto3\";\npackage example;\nmessage Other { int32 n = 1; }\nmessage Event { string id = 1; string text = 2; }\n"
	itemSchema = `{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"qty":{"type":"integer","minimum":1}},"additionalProperties":false}`
)

// modelsConfig: items hold JSON checked against an inline JSON Schema;
// orders hold Avro and events Protobuf, both from the registry, served and
// written as JSON (view json); notes hold Avro from an inline schema.
const modelsConfig = `
catalogs:
  inline0:
    type: inline
    options:
      subjects:
        item: { schema: '%s' }
        order: { schema: '%s' }
  registry0:
    type: schema-registry
    options: { url: "%s", max-age: 1h, timeout: 2s, retry-after: 1s }
bindings:
  kafka0:
    type: kafka
    kind: client
    options:
      bootstrap.servers: "localhost:9092"
      topics:
        - name: items
          key: { model: string, pattern: "[a-z0-9-]+" }
          value: { model: json, catalog: { inline0: [{ subject: item }] } }
        - name: orders
          value: { model: avro, view: json, catalog: { registry0: [{ strategy: topic }] } }
        - name: events
          value: { model: protobuf, view: json, catalog: { registry0: [{ strategy: topic, record: example.Event }] } }
        - name: cold
          value: { model: avro, view: json, catalog: { registry0: [{ strategy: topic }] } }
        - name: quotes
          value: { model: avro, view: json, catalog: { inline0: [{ subject: order }] } }
        - name: quote-replies
          value: { model: avro, view: json, catalog: { inline0: [{ subject: order }] } }
        - name: notes
          value: { model: avro, view: json, catalog: { inline0: [{ subject: order }] } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: items, key: "${params.id}" }
      - when: [{ method: POST, path: "/quotes/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: quotes, key: "${params.id}", reply-to: quote-replies }
      - when: [{ method: POST, path: "/{topic}/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: "${params.topic}", topic-pattern: "*", key: "${params.id}" }
      - when: [{ method: GET, path: "/{topic}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.topic}", topic-pattern: "*", merge: { content-type: application/json } }
      - when: [{ method: GET, path: "/{topic}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.topic}", topic-pattern: "*", filters: [{ key: "${params.id}" }] }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Events }]
        exit: kafka0
        with: { capability: produce, topic: events, key: "${idempotencyKey}" }
limits: { kafka-timeout: 5s }
`

// countingRegistry is srfake (the real sr client's fake, on loopback)
// counting the requests it serves and failing them while down.
type countingRegistry struct {
	*srfake.Registry
	requests atomic.Int64
	down     atomic.Bool
	// failing fails the requests whose path contains it (one subject
	// unreachable, for a cold cache).
	failing atomic.Pointer[string]
}

func newCountingRegistry(t *testing.T) *countingRegistry {
	r := &countingRegistry{Registry: srfake.New()}
	r.Intercept(func(w http.ResponseWriter, req *http.Request) bool {
		r.requests.Add(1)
		if f := r.failing.Load(); r.down.Load() || f != nil && strings.Contains(req.URL.Path, *f) {
			http.Error(w, `{"error_code":50003,"message":"backend unavailable"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	t.Cleanup(r.Close)
	return r
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func startModels(t *testing.T) (*env, *countingRegistry) {
	reg := newCountingRegistry(t)
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	reg.SeedSchema("events-value", 1, 12, sr.Schema{Schema: eventProto, Type: sr.TypeProtobuf})
	reg.SeedSchema("cold-value", 1, 8, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	cold := "cold-value"
	reg.failing.Store(&cold) // never reached: its schema is never cached
	yaml := fmt.Sprintf(modelsConfig, itemSchema, oneLine(orderAvro), reg.URL())
	e := startEnv(t, yaml, withTopics(
		embedded.Topic{Name: "items", Compact: true}, embedded.Topic{Name: "orders", Compact: true},
		embedded.Topic{Name: "events", Compact: true}, embedded.Topic{Name: "notes", Compact: true},
		embedded.Topic{Name: "cold", Compact: true}, embedded.Topic{Name: "quotes"}, embedded.Topic{Name: "quote-replies"}),
		func(o *stack.DevOptions) {
			o.Responders = append(o.Responders, responder.Options{Topic: "quotes", Handler: avroQuoter, Logger: slog.New(slog.DiscardHandler)})
		})
	return e, reg
}

// avroQuoter answers an Avro order {"name":"a","qty":1,"note":"x"} with the
// Avro order {"name":"b","qty":2,"note":null}, and anything else with 400.
func avroQuoter(_ context.Context, req *responder.Request) ([]responder.Reply, error) {
	if !bytes.Equal(req.Value, []byte{2, 'a', 2, 2, 2, 'x'}) {
		return []responder.Reply{responder.HTTPReply(http.StatusBadRequest, []byte("unknown order"))}, nil
	}
	return []responder.Reply{responder.HTTPReply(http.StatusOK, []byte{2, 'b', 4, 0})}, nil
}

// problem decodes a problem+json answer.
type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Pointer, Detail, Keyword string
	} `json:"errors"`
}

func wantProblem(t *testing.T, what string, resp *http.Response, body string, status int) problem {
	t.Helper()
	var p problem
	if resp.StatusCode != status || resp.Header.Get("content-type") != "application/problem+json" || json.Unmarshal([]byte(body), &p) != nil || p.Status != status {
		t.Fatalf("%s: %d %s %q, want %d problem+json", what, resp.StatusCode, resp.Header.Get("content-type"), body, status)
	}
	return p
}

func TestModels(t *testing.T) {
	t.Parallel()
	e, reg := startModels(t)
	post := func(path, body, ct string) (*http.Response, string) {
		return e.request(e.h1, "POST", path, body, "content-type", ct)
	}

	t.Run("json schema inline: valid written, invalid refused with every violation", func(t *testing.T) {
		if resp, body := post("/items/pen", `{"name":"pen","qty":2}`, "application/json"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("valid item: %d %s", resp.StatusCode, body)
		}
		resp, body := post("/items/cup", `{"qty":0,"colour":"crimson"}`, "application/json")
		p := wantProblem(t, "invalid item", resp, body, http.StatusUnprocessableEntity)
		pointers := map[string]bool{}
		for _, v := range p.Errors {
			pointers[v.Pointer] = true
		}
		if len(p.Errors) < 3 || !pointers["#"] || !pointers["#/qty"] {
			t.Errorf("violations %+v: want the missing name (#), qty's minimum (#/qty) and the extra colour", p.Errors)
		}
		if strings.Contains(body, "crimson") {
			t.Errorf("the problem echoes a value: %s", body)
		}
		resp, body = post("/items/cup", `{"name":`, "application/json")
		wantProblem(t, "unparsable item", resp, body, http.StatusBadRequest)
		resp, body = post("/items/cup", `name=cup`, "application/x-www-form-urlencoded")
		wantProblem(t, "form body", resp, body, http.StatusUnsupportedMediaType)
		if resp.Header.Get("accept") != "application/json" {
			t.Errorf("415 without accept: %v", resp.Header)
		}
		resp, body = post("/items/Bad%20Key", `{"name":"x"}`, "application/json")
		p = wantProblem(t, "bad key", resp, body, http.StatusUnprocessableEntity)
		if !strings.HasPrefix(p.Detail, "the key: ") {
			t.Errorf("bad key detail %q: want it to name the key", p.Detail)
		}
		ms := e.readTopic("items")
		if len(ms) != 1 || string(ms[0].Key) != "pen" || string(ms[0].Value) != `{"name":"pen","qty":2}` {
			t.Errorf("items: want only pen written unchanged, got %d records", len(ms))
		}
	})

	t.Run("avro from the registry: JSON written in the wire format, served as JSON", func(t *testing.T) {
		if resp, body := post("/orders/o1", `{"name":"pen","qty":2,"note":null}`, "application/json"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("valid order: %d %s", resp.StatusCode, body)
		}
		resp, body := post("/orders/o2", `{"name":"pen","qty":"two","note":null}`, "application/json")
		wantProblem(t, "invalid order", resp, body, http.StatusUnprocessableEntity)
		resp, body = post("/orders/o2", `{"name":"pen","qty":2,"note":null,"extra":1}`, "application/json")
		wantProblem(t, "order with an undeclared field", resp, body, http.StatusUnprocessableEntity)
		ms := e.readTopic("orders")
		// Magic byte 0, schema id 7 big-endian, then Avro: "pen" (06 p e n),
		// 2 (04), the union's null branch (00).
		want := []byte{0, 0, 0, 0, 7, 6, 'p', 'e', 'n', 4, 0}
		if len(ms) != 1 || !bytes.Equal(ms[0].Value, want) {
			t.Fatalf("orders: got %d records, first %x; want one %x", len(ms), firstValue(ms), want)
		}
		resp, body = e.request(e.h1, "GET", "/orders/o1", "")
		if resp.StatusCode != http.StatusOK || body != `{"name":"pen","qty":2,"note":null}` {
			t.Errorf("GET /orders/o1: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("protobuf from the registry: message indexes in the frame, served as JSON", func(t *testing.T) {
		if resp, body := post("/events/e1", `{"id":"e1","text":"hi"}`, "application/json"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("valid event: %d %s", resp.StatusCode, body)
		}
		resp, body := post("/events/e2", `{"id":"e2","colour":"red"}`, "application/json")
		wantProblem(t, "event with an undeclared field", resp, body, http.StatusUnprocessableEntity)
		ms := e.readTopic("events")
		// Magic byte, id 12, indexes [1] (count 1, index 1, zigzag), then
		// fields 1 and 2 as length-delimited strings.
		want := []byte{0, 0, 0, 0, 12, 2, 2, 0x0a, 2, 'e', '1', 0x12, 2, 'h', 'i'}
		if len(ms) != 1 || !bytes.Equal(ms[0].Value, want) {
			t.Fatalf("events: got %d records, first %x; want one %x", len(ms), firstValue(ms), want)
		}
		// A record whose id is in no schema of this model is left out and counted.
		e.put("events", 0, "e9", []byte{0, 0, 0, 0, 99, 0, 1, 2})
		e.put("events", 0, "e3", []byte{0, 0, 0, 0, 12, 2, 2, 0x0a, 2, 'e', '3'})
		pollUntil(t, "e3 in the view", func() bool {
			resp, _ := e.request(e.h1, "GET", "/events/e3", "")
			return resp.StatusCode == http.StatusOK
		})
		// Written without a content-type, served as the JSON it now is.
		if resp, body := e.request(e.h1, "GET", "/events/e3", ""); resp.Header.Get("content-type") != "application/json" || body != `{"id":"e3"}` {
			t.Errorf("GET /events/e3: %q %s, want application/json {\"id\":\"e3\"}", resp.Header.Get("content-type"), body)
		}
		resp, body = e.request(e.h1, "GET", "/events", "")
		if resp.StatusCode != http.StatusOK || body != `[{"id":"e1","text":"hi"},{"id":"e3"}]` {
			t.Errorf("merged events: %d %s", resp.StatusCode, body)
		}
		if resp, _ := e.request(e.h1, "GET", "/events/e9", ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("the record that does not match: %d, want 404 (left out)", resp.StatusCode)
		}
		if n := e.counter("kafka_ext_proc_model_invalid_records_total"); n != 1 {
			t.Errorf("invalid records counted: %v, want 1", n)
		}
		// ETags keep working on converted views.
		etag := resp.Header.Get("etag")
		if r2, _ := e.request(e.h1, "GET", "/events", "", "if-none-match", etag); etag == "" || r2.StatusCode != http.StatusNotModified {
			t.Errorf("merged events again with etag %q: %d, want 304", etag, r2.StatusCode)
		}
	})

	t.Run("grpc: a protobuf message framed on its way in; a bad one INVALID_ARGUMENT with BadRequest", func(t *testing.T) {
		before := len(e.readTopic("events"))
		// Event{id: "g1", text: "yo"}.
		if _, err := auditUnary(e, "/example.Events/Put", []byte{0x0a, 2, 'g', '1', 0x12, 2, 'y', 'o'}, "idempotency-key", "g1"); err != nil {
			t.Fatalf("valid event over gRPC: %v", err)
		}
		// Field 2 as a varint: a wrong wire type for a string.
		_, err := auditUnary(e, "/example.Events/Put", []byte{0x0a, 2, 'g', '2', 0x10, 5}, "idempotency-key", "g2")
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument {
			t.Fatalf("bad event over gRPC: %v, want INVALID_ARGUMENT", err)
		}
		var br *errdetails.BadRequest
		for _, d := range st.Details() {
			if b, ok := d.(*errdetails.BadRequest); ok {
				br = b
			}
		}
		if br == nil || len(br.GetFieldViolations()) == 0 || br.GetFieldViolations()[0].GetDescription() == "" {
			t.Errorf("bad event: details %v, want a google.rpc.BadRequest with a field violation", st.Details())
		}
		ms := e.readTopic("events")
		if len(ms) != before+1 {
			t.Fatalf("events: %d records after the calls, want %d (the bad one not written)", len(ms), before+1)
		}
		want := []byte{0, 0, 0, 0, 12, 2, 2, 0x0a, 2, 'g', '1', 0x12, 2, 'y', 'o'}
		if last := ms[len(ms)-1]; string(last.Key) != "g1" || !bytes.Equal(last.Value, want) {
			t.Errorf("gRPC event: %s %x, want g1 %x", last.Key, last.Value, want)
		}
	})

	t.Run("request-reply: the request written as Avro, the Avro reply answered as JSON", func(t *testing.T) {
		resp, body := post("/quotes/q1", `{"name":"a","qty":1,"note":"x"}`, "application/json")
		if resp.StatusCode != http.StatusOK || body != `{"name":"b","qty":2,"note":null}` || resp.Header.Get("content-type") != "application/json" {
			t.Errorf("quote: %d %s %q, want 200 application/json with the reply as JSON", resp.StatusCode, resp.Header.Get("content-type"), body)
		}
		// The responder's own error answer passes as it is.
		resp, body = post("/quotes/q2", `{"name":"z","qty":1,"note":null}`, "application/json")
		if resp.StatusCode != http.StatusBadRequest || body != "unknown order" {
			t.Errorf("refused quote: %d %q, want the responder's 400 as it wrote it", resp.StatusCode, body)
		}
	})

	t.Run("avro inline: unframed", func(t *testing.T) {
		if resp, body := post("/notes/n1", `{"name":"a","qty":1,"note":"x"}`, "application/json"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("valid note: %d %s", resp.StatusCode, body)
		}
		resp, body := post("/notes/n2", `[1]`, "application/json")
		wantProblem(t, "note not an object", resp, body, http.StatusUnprocessableEntity)
		ms := e.readTopic("notes")
		want := []byte{2, 'a', 2, 2, 2, 'x'}
		if len(ms) != 1 || !bytes.Equal(ms[0].Value, want) {
			t.Errorf("notes: got %d records, first %x; want one %x", len(ms), firstValue(ms), want)
		}
	})

	t.Run("registry: steady state makes no requests; a warm cache survives an outage", func(t *testing.T) {
		before := reg.requests.Load()
		for i := range 5 {
			if resp, body := post(fmt.Sprintf("/orders/s%d", i), `{"name":"pen","qty":3,"note":null}`, "application/json"); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("order %d: %d %s", i, resp.StatusCode, body)
			}
		}
		if n := reg.requests.Load() - before; n != 0 {
			t.Errorf("steady state: %d registry requests, want 0", n)
		}
		reg.down.Store(true)
		defer reg.down.Store(false)
		if resp, body := post("/orders/w1", `{"name":"pen","qty":3,"note":null}`, "application/json"); resp.StatusCode != http.StatusNoContent {
			t.Errorf("warm cache during an outage: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("registry: a cold schema during an outage answers 503 with the reason", func(t *testing.T) {
		// The cold topic's subject has never been answered.
		resp, body := post("/cold/c1", `{"name":"pen","qty":3,"note":null}`, "application/json")
		p := wantProblem(t, "cold schema", resp, body, http.StatusServiceUnavailable)
		if !strings.Contains(p.Detail, "cannot be reached") || resp.Header.Get("retry-after") == "" {
			t.Errorf("cold schema: %q retry-after %q, want the reason and a retry-after", p.Detail, resp.Header.Get("retry-after"))
		}
		// /readyz says so, and stays ready: cached schemas are served.
		ready, _ := e.dev.Processor.Readiness.Ready()
		notes := strings.Join(e.dev.Processor.Readiness.Notes(), "\n")
		if !ready || !strings.Contains(notes, "catalog registry0: the schema registry is unreachable") {
			t.Errorf("readiness %v with notes %q: want ready, noting the unreachable registry", ready, notes)
		}
		if up := e.gauge("kafka_ext_proc_schema_registry_up"); up != 0 {
			t.Errorf("kafka_ext_proc_schema_registry_up = %v during the outage, want 0", up)
		}
		if ms := e.readTopic("cold"); len(ms) != 0 {
			t.Errorf("cold: %d records written, want none", len(ms))
		}
	})
}

// counter sums a counter of the processor's registry.
func (e *env) counter(name string) float64 {
	e.t.Helper()
	mfs, err := e.dev.Processor.Registry.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func firstValue(ms []*kafka.Message) []byte {
	if len(ms) == 0 {
		return nil
	}
	return ms[0].Value
}
