package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
)

// order answers POST /orders/{id}. The request's method and path are its
// :method and :path headers; the reply's status is its :status header, its
// other headers are the response's, its value the body.
func (s *service) order(ctx context.Context, m *kafka.Message, cid string) error {
	id, ok := strings.CutPrefix(header(m, ":path"), "/orders/")
	if !ok || header(m, ":method") != "POST" {
		return s.reply(ctx, m, problem(404, "Not Found", "this service answers POST /orders/{id} only"),
			kafka.Header{Key: ":status", Value: []byte("404")},
			kafka.Header{Key: "content-type", Value: []byte("application/problem+json")})
	}
	id, _, _ = strings.Cut(id, "?") // :path keeps the query
	if id == "0" {
		return s.reply(ctx, m, problem(404, "Not Found", "no order 0"),
			kafka.Header{Key: ":status", Value: []byte("404")},
			kafka.Header{Key: "content-type", Value: []byte("application/problem+json")})
	}
	var body struct {
		Qty  int  `json:"qty"`
		Slow bool `json:"slow"`
	}
	if err := json.Unmarshal(m.Value, &body); err != nil {
		return s.reply(ctx, m, problem(400, "Bad Request", "the body must be a JSON object: "+err.Error()),
			kafka.Header{Key: ":status", Value: []byte("400")},
			kafka.Header{Key: "content-type", Value: []byte("application/problem+json")})
	}
	answer := func(ctx context.Context) error {
		value, _ := json.Marshal(map[string]any{"id": id, "qty": body.Qty, "status": "accepted"})
		return s.reply(ctx, m, value,
			kafka.Header{Key: ":status", Value: []byte("201")},
			kafka.Header{Key: "content-type", Value: []byte("application/json")},
			kafka.Header{Key: "location", Value: []byte("/orders/" + id)},
			kafka.Header{Key: "x-order-status", Value: []byte("accepted")})
	}
	if !body.Slow {
		return answer(ctx)
	}
	// A slow order is answered later, without holding up the others: its
	// client times out first and gets the reply by retrying with the same
	// idempotency key.
	time.AfterFunc(s.late, func() {
		if err := answer(ctx); err != nil {
			log.Printf("answering %s late: %v", cid, err)
		}
	})
	return nil
}

func problem(status int, title, detail string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
	return b
}

// echo answers example.Echo calls: a record per request message (its value
// the bare protobuf message, no gRPC prefix), then a null-value record at
// the client's half-close. Each reply with a value is a response message;
// a null-value reply ends the call with gateway:status (and
// gateway:message), its meta:* headers the trailers.
func (s *service) echo(ctx context.Context, m *kafka.Message, cid string) error {
	if s.ended.has(cid) {
		return nil // ended already: nothing more is read of this call
	}
	if m.Value == nil { // the client half-closed: end the call OK
		return s.reply(ctx, m, nil, kafka.Header{Key: statusHeader, Value: []byte("0")})
	}
	var msg example.EchoMessage
	if err := proto.Unmarshal(m.Value, &msg); err != nil {
		s.ended.add(cid)
		return s.reply(ctx, m, nil,
			kafka.Header{Key: statusHeader, Value: []byte("3")}, // INVALID_ARGUMENT
			kafka.Header{Key: messageHeader, Value: []byte("not an example.EchoMessage: " + err.Error())})
	}
	if msg.GetMessage() == "missing" {
		// A service may end a call before the client half-closes: the
		// processor ends it at the first null-value reply.
		s.ended.add(cid)
		return s.reply(ctx, m, nil,
			kafka.Header{Key: statusHeader, Value: []byte("5")}, // NOT_FOUND
			kafka.Header{Key: messageHeader, Value: []byte("nothing is called missing")},
			kafka.Header{Key: "meta:x-lookup", Value: []byte("names")})
	}
	value, err := proto.Marshal(&example.EchoMessage{Message: msg.GetMessage()})
	if err != nil {
		return fmt.Errorf("encoding the reply: %w", err)
	}
	return s.reply(ctx, m, value, kafka.Header{Key: "meta:x-served-by", Value: []byte("service-responder")})
}
