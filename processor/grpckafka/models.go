package grpckafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/models"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// Topic models on gRPC produce: each request message is checked against
// the value model of its topic (a protobuf model's record) before it is
// written, and framed in the registry's wire format when the model frames.
// A message that does not match ends the call INVALID_ARGUMENT, with one
// google.rpc.BadRequest field violation per violation in
// grpc-status-details-bin; a schema that cannot be had ends it UNAVAILABLE.
// Messages written before it stay written, as with any failure mid-stream.

// encodeMessage applies the topic's value model to one request message.
func encodeMessage(ctx context.Context, kc *config.KafkaCluster, topic string, msg []byte) ([]byte, *handler.Status) {
	tm := kc.Models(topic)
	if tm == nil || tm.Value == nil {
		return msg, nil
	}
	out, err := tm.Value.EncodeNative(ctx, nil, msg)
	if err != nil {
		st := modelStatus(err, "the request message")
		return nil, &st
	}
	return out, nil
}

// encodeKey applies the topic's key model to the call's key.
func encodeKey(ctx context.Context, kc *config.KafkaCluster, topic string, key []byte) ([]byte, *handler.Status) {
	tm := kc.Models(topic)
	if tm == nil || tm.Key == nil || key == nil {
		return key, nil
	}
	out, err := tm.Key.Encode(ctx, nil, key)
	if err != nil {
		st := modelStatus(err, "the key")
		return nil, &st
	}
	return out, nil
}

// modelStatus is the status of a value a model refused.
func modelStatus(err error, what string) handler.Status {
	var e *models.Error
	if !errors.As(err, &e) {
		return handler.NewStatus(codes.Internal, "checking "+what+" failed")
	}
	p := e.Problem()
	if e.Kind == models.KindUnavailable {
		return handler.NewStatus(codes.Unavailable, what+": "+p.Detail)
	}
	msg := what + ": " + p.Detail
	if len(e.Violations) > 0 {
		msg += ": " + e.Violations[0].Pointer + ": " + e.Violations[0].Detail
	}
	br := &errdetails.BadRequest{}
	for _, v := range e.Violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: fieldPath(v.Pointer), Description: v.Detail,
		})
	}
	st := handler.NewStatus(codes.InvalidArgument, msg)
	if s, err := status.New(codes.InvalidArgument, msg).WithDetails(br); err == nil {
		if b, err := protoMarshal(s); err == nil {
			st.Trailers = append(st.Trailers, route.Header{Name: "grpc-status-details-bin", Value: base64.RawStdEncoding.EncodeToString(b)})
		}
	}
	return st
}

// fieldPath turns a JSON pointer fragment ("#/items/0/qty") into the
// dotted path google.rpc.BadRequest uses ("items[0].qty"); "" is the
// whole message.
func fieldPath(pointer string) string {
	p := strings.TrimPrefix(strings.TrimPrefix(pointer, "#"), "/")
	if p == "" {
		return ""
	}
	var b strings.Builder
	for i, tok := range strings.Split(p, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			fmt.Fprintf(&b, "[%s]", tok)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func protoMarshal(s *status.Status) ([]byte, error) { return proto.Marshal(s.Proto()) }

// refusedError carries a model's refusal of a request message from the
// request side of a call to the side that ends it.
type refusedError struct{ st handler.Status }

func (e *refusedError) Error() string { return e.st.Message }

// Topic models on gRPC fetch streams and replies: values in Kafka may carry
// the registry's framing, which a client's protobuf decoder cannot read. The
// log tails decode fetch streams' records once per record (the stack's
// logtails.StreamDecoder); replies are decoded here, per reply.

// laterReason says why a stream's next record cannot be decoded now.
func laterReason(err error) string {
	var e *models.Error
	if !errors.As(err, &e) {
		return "its schema cannot be had"
	}
	why := "the schema registry cannot be reached"
	if errors.Is(e.Err, models.ErrNotFound) {
		why = "the catalog does not have it"
	}
	return fmt.Sprintf("schema %s is unavailable (%s)", e.Subject, why)
}

// decodeReply checks a reply message against the reply topic's value model
// and takes the registry's framing off. A reply that does not match is the
// responder's fault, not the client's: the call ends INTERNAL (HTTP answers
// 502), without sending it half-read; a schema that cannot be had ends it
// UNAVAILABLE.
func decodeReply(ctx context.Context, kc *config.KafkaCluster, rec *client.Record) ([]byte, *handler.Status) {
	tm := kc.Models(rec.Topic)
	if tm == nil || tm.Value == nil {
		return rec.Value, nil
	}
	v, err := tm.Value.DecodeNative(ctx, nil, rec.Value)
	if err == nil {
		return v, nil
	}
	var st handler.Status
	if models.KindOf(err) == models.KindUnavailable {
		st = handler.NewStatus(codes.Unavailable, fmt.Sprintf(
			"the reply on topic %q cannot be decoded now: %s; retry later", rec.Topic, laterReason(err)))
	} else {
		st = handler.NewStatus(codes.Internal, fmt.Sprintf(
			"the reply on topic %q does not match its model: %s", rec.Topic, firstViolation(err)))
	}
	return nil, &st
}

func firstViolation(err error) string {
	var e *models.Error
	if errors.As(err, &e) && len(e.Violations) > 0 {
		return e.Subject + ": " + e.Violations[0].Pointer + ": " + e.Violations[0].Detail
	}
	return "it does not parse"
}
