package main

import (
	"fmt"
	"maps"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// responderKinds are the demo responders dev and the responder command
// run: each answers every request record of a topic.
var responderKinds = map[string]struct {
	binding config.BindingType
	options func() responder.Options
}{
	// An http-kafka request gets 201 (POST) or 200 and a JSON echo of it.
	"http-echo": {config.HTTPKafka, func() responder.Options {
		return responder.Options{Handler: responder.HTTPEcho()}
	}},
	// Every message of a gRPC call is echoed; the call ends OK.
	"grpc-echo": {config.GRPCKafka, func() responder.Options {
		return responder.Options{Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey}
	}},
}

// responderSpec is one --responder KIND:TOPIC.
type responderSpec struct{ kind, topic string }

// responderFlag collects dev's repeatable --responder flags.
type responderFlag []responderSpec

const responderUsage = "`KIND:TOPIC`: run a demo responder answering the request records of TOPIC (repeatable). KIND is http-echo (201 for a POST, else 200, and a JSON echo of the request) or grpc-echo (echoes every message of a call, then OK); the replies go to the route's reply-to"

func (f *responderFlag) String() string {
	var s []string
	for _, r := range *f {
		s = append(s, r.kind+":"+r.topic)
	}
	return strings.Join(s, ",")
}

func (f *responderFlag) Set(v string) error {
	kind, topic, ok := strings.Cut(v, ":")
	if _, known := responderKinds[kind]; !ok || !known || topic == "" {
		return fmt.Errorf("%q: want KIND:TOPIC with KIND http-echo or grpc-echo", v)
	}
	for _, r := range *f {
		if r.topic == topic {
			return fmt.Errorf("two responders for topic %q", topic)
		}
	}
	*f = append(*f, responderSpec{kind, topic})
	return nil
}

// options resolves each responder against the configuration: the
// request-reply route writing to its topic must be of the binding type the
// kind answers, and its binding names the correlation headers. A topic
// one of the running responders answers already is refused: both would
// reply.
func (f responderFlag) options(cfg *config.Config, running []responder.Options) ([]responder.Options, error) {
	var out []responder.Options
	for _, r := range f {
		for _, o := range running {
			if o.Topic == r.topic {
				return nil, fmt.Errorf("--responder %s:%s: a responder already answers topic %q", r.kind, r.topic, r.topic)
			}
		}
		k := responderKinds[r.kind]
		var chosen *config.Binding
		var with *config.With
		var exit string
		var other []string
		for _, b := range cfg.Bindings {
			for _, rt := range b.Routes {
				w := rt.With
				if w == nil || w.Capability != config.Produce || !w.Topic.Static() || w.Topic.Raw != r.topic || w.ReplyTo == "" {
					continue
				}
				if b.Type != k.binding {
					other = append(other, fmt.Sprintf("%s binding %q", b.Type, b.Name))
				} else if chosen == nil {
					chosen, with, exit = b, w, rt.Exit
				}
			}
		}
		switch {
		case chosen == nil && len(other) > 0:
			return nil, fmt.Errorf("--responder %s:%s: topic %q is written by %s, which %s does not answer", r.kind, r.topic, r.topic, strings.Join(other, ", "), r.kind)
		case chosen == nil:
			return nil, fmt.Errorf("--responder %s:%s: no request-reply route (produce with reply-to) writes to topic %q", r.kind, r.topic, r.topic)
		}
		corr := config.CorrelationHeaders{}
		if chosen.HTTP != nil {
			corr = chosen.HTTP.Correlation
		} else if chosen.GRPC != nil {
			corr = chosen.GRPC.Correlation
		}
		o := k.options()
		o.Topic, o.ReplyTo = r.topic, with.ReplyTo
		if kc := cfg.Kafka[exit]; kc != nil {
			o.Properties = maps.Clone(kc.Properties) // dev points bootstrap.servers at its broker
		}
		o.CorrelationHeader, o.ReplyToHeader = corr.CorrelationID, corr.ReplyTo
		o.StatusHeader, o.MessageHeader = corr.Status, corr.Message
		out = append(out, o)
	}
	return out, nil
}
