package httpkafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/models"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// Topic models on produce: the key and the body are checked against the
// models of the topic (the kafka binding's options.topics) before anything
// is written, and converted when the model has a view:
//
//   - a body whose content-type the model cannot read: 415 with `accept`;
//   - a body (or key) that does not parse: 400 problem+json;
//   - one that parses but violates the schema: 422 problem+json with every
//     violation in `errors` (RFC 9457 §3: pointer, detail, keyword);
//   - a schema that cannot be had now (registry down, subject missing): 503
//     with retry-after, the reason in the detail.
//
// A DELETE writes a tombstone: its key is checked, it has no value.

// retryAfterUnavailable is the retry-after of a 503 for a schema that
// cannot be had: the registry catalog asks again after its retry-after
// (default 5s).
const retryAfterUnavailable = "5"

// encodeRecord applies the topic's models to rec's key and value; nil when
// the record may be written.
func encodeRecord(ctx context.Context, kc *config.KafkaCluster, method string, headers route.Headers, rec *client.Record) *handler.HTTPResponse {
	tm := kc.Models(rec.Topic)
	if tm == nil {
		return nil
	}
	if tm.Key != nil && rec.Key != nil {
		k, err := tm.Key.EncodeValue(ctx, rec.Key)
		if err != nil {
			return modelProblem(err, "the key")
		}
		rec.Key = k
	}
	if tm.Value == nil || rec.Value == nil || method == http.MethodDelete {
		return nil
	}
	if bad := acceptable(tm.Value, headers); bad != nil {
		return bad
	}
	v, err := tm.Value.EncodeValue(ctx, rec.Value)
	if err != nil {
		return modelProblem(err, "the body")
	}
	rec.Value = v
	return nil
}

// acceptable refuses a body a JSON model cannot read: a content-type that
// is not JSON (application/json or a +json type). A request without
// content-type is read as JSON. Models of binary formats (avro or protobuf
// without a view, primitives) take any content-type.
func acceptable(m *models.Model, headers route.Headers) *handler.HTTPResponse {
	if !m.JSON() {
		return nil
	}
	ct, ok := headers.Lookup("content-type")
	if !ok || ct == "application/json" { // the usual value, without ParseMediaType's allocations
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return handler.ProblemResponse(http.StatusUnsupportedMediaType,
		fmt.Sprintf("this topic's values are JSON checked against a schema; send content-type application/json, not %q", ct),
		route.Header{Name: "accept", Value: "application/json"})
}

// modelProblem answers a value a model refused. what names the part of
// the request ("the body", "the key") for errors without a pointer into it.
func modelProblem(err error, what string) *handler.HTTPResponse {
	var e *models.Error
	if !errors.As(err, &e) {
		return handler.ProblemResponse(http.StatusInternalServerError, "checking "+what+" failed")
	}
	p := e.Problem()
	if what != "the body" {
		p.Detail = what + ": " + p.Detail
	}
	headers := []route.Header{{Name: "content-type", Value: "application/problem+json"}}
	if e.Kind == models.KindUnavailable {
		p.Detail += reason(e)
		headers = append(headers, route.Header{Name: "retry-after", Value: retryAfterUnavailable})
	}
	body, _ := json.Marshal(p) // strings, ints and slices of them
	return &handler.HTTPResponse{Status: p.Status, Headers: headers, Body: body}
}

// reason says why a schema cannot be had, without the registry's own words
// (which may carry its address): unreachable, or the subject is missing.
func reason(e *models.Error) string {
	if errors.Is(e.Err, models.ErrNotFound) {
		return " (the catalog does not have it)"
	}
	return " (the schema registry cannot be reached)"
}

// decodeReply converts a reply record's value for the client when the reply
// topic's value model has a view; a reply that does not match is a 502.
func decodeReply(ctx context.Context, kc *config.KafkaCluster, rec *client.Record) (*client.Record, *handler.HTTPResponse) {
	tm := kc.Models(rec.Topic)
	if tm == nil || tm.Value == nil || len(rec.Value) == 0 || !successReply(rec) {
		return rec, nil
	}
	v, err := tm.Value.Decode(ctx, nil, rec.Value)
	if err != nil {
		var e *models.Error
		if errors.As(err, &e) && e.Kind == models.KindUnavailable {
			return nil, modelProblem(err, "the reply")
		}
		return nil, handler.ProblemResponse(http.StatusBadGateway,
			fmt.Sprintf("the reply on topic %q does not match its model: %s", rec.Topic, firstViolation(err)))
	}
	out := *rec
	out.Value = v
	if tm.Value.JSON() {
		out.Headers = client.ReplaceHeader(rec.Headers, "content-type", []byte("application/json"))
	}
	return &out, nil
}

func firstViolation(err error) string {
	var e *models.Error
	if errors.As(err, &e) && len(e.Violations) > 0 {
		return e.Violations[0].Pointer + ": " + e.Violations[0].Detail
	}
	return "it does not parse"
}

// successReply reports whether a reply record answers 2xx (no :status is 200).
func successReply(rec *client.Record) bool {
	for _, h := range rec.Headers {
		if h.Key == ":status" {
			return len(h.Value) == 3 && h.Value[0] == '2'
		}
	}
	return true
}
