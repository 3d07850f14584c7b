package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// The kafka-grpc binding (kind remote_server) is the service side of a
// grpc-kafka request-reply route: it reads the request records the
// grpc-kafka binding writes, calls a gRPC service for them and writes the
// replies. It shares no route table with the proxy bindings (a request
// never reaches it through Envoy), so its model, shape and decoder live
// here, apart from theirs.

// KafkaGRPCType is the type of a kafka-grpc binding.
const KafkaGRPCType = "kafka-grpc"

// KafkaGRPCBinding is a kafka-grpc binding of kind remote_server.
type KafkaGRPCBinding struct {
	Name string
	// Acks is the acknowledgement mode of the reply records (default
	// in_sync_replicas, as a grpc-kafka produce route's).
	Acks Acks
	// Correlation names the headers the grpc-kafka binding writes and reads;
	// the defaults are the grpc-kafka binding's, so its records are the
	// contract (docs/service-contract.md).
	Correlation CorrelationHeaders
	// MaxCalls bounds the calls a worker of the binding has in flight
	// (default 256); MaxCallsPerPartition those of one request partition
	// (default 32), so that one busy partition cannot take every slot.
	MaxCalls, MaxCallsPerPartition int
	// IdempotencyMetadata is the metadata the grpc-kafka binding reads the
	// idempotency key from (its options.idempotency.metadata, default
	// idempotency-key): a call refused for a key used by another request
	// names the key it finds there.
	IdempotencyMetadata string
	Routes              []*KafkaGRPCRoute
	Pos                 Pos
}

// Defaults of a kafka-grpc binding's bounds of calls in flight.
const (
	DefaultKafkaGRPCMaxCalls             = 256
	DefaultKafkaGRPCMaxCallsPerPartition = 32
)

// GroupID is the consumer group of the binding's request readers: every
// replica running the same binding shares the request topics' partitions.
func (b *KafkaGRPCBinding) GroupID() string { return "kafka-ext-proc.kafka-grpc." + b.Name }

// KafkaGRPCRoute is one route of a kafka-grpc binding: the calls of its
// conditions go to the service at Scheme://Authority.
type KafkaGRPCRoute struct {
	Index     int
	When      []KafkaGRPCCondition // ORed; at least one
	Exit      string               // the kafka binding the topics are on
	Scheme    string               // http: plaintext HTTP/2; https: TLS
	Authority string               // host:port of the service
	// Deadline bounds each attempt at a call (0: none): the service gets
	// it as grpc-timeout, and a call past it ends DEADLINE_EXCEEDED.
	Deadline time.Duration
	// TLS is the client TLS of scheme https (nil for http): the system's
	// roots unless with.tls names a CA, and a client certificate for mTLS.
	// Not marshalled (it holds functions): TLSSource says what it came from,
	// which is what a JSON walk of the configuration (dev's check of unset
	// variables) must see.
	TLS *tls.Config `json:"-"`
	// TLSSource is with.tls as written: what a reload compares (a
	// tls.Config cannot be compared).
	TLSSource string
	Pos       Pos
}

// KafkaGRPCCondition selects request records: read from Topic, answered on
// ReplyTo, for Method ("pkg.Service/Method" or "pkg.Service/*").
type KafkaGRPCCondition struct {
	Topic   string
	ReplyTo string
	Method  string
	Pos     Pos
}

// Matches reports whether a call of service/method read from topic with
// reply topic replyTo is the condition's.
func (c KafkaGRPCCondition) Matches(topic, replyTo, service, method string) bool {
	if c.Topic != topic || c.ReplyTo != replyTo {
		return false
	}
	svc, m, _ := strings.Cut(c.Method, "/")
	return svc == service && (m == "*" || m == method)
}

// kafkaGRPCShape is the kafka-grpc binding's part of the file's shape.
type kafkaGRPCShape struct {
	binding, options, correlation, idempotency *section
	route, condition, with                     *section
}

// hiddenRemote is why Describe leaves out the kafka-grpc binding: it
// prints the routes requests take through the ext_proc port.
const hiddenRemote = "a kafka-grpc binding answers records read from Kafka, not requests through Envoy: Describe prints the routes of the ext_proc port"

func newKafkaGRPCShape(grpcCorrelationHeaders, tlsFiles *section) *kafkaGRPCShape {
	k := &kafkaGRPCShape{}
	k.correlation = &section{fields: []field{{name: "headers", schema: grpcCorrelationHeaders, hidden: hiddenRemote}}}
	k.idempotency = &section{fields: []field{
		{name: "metadata", schema: ref("nonEmpty"), hidden: hiddenRemote,
			doc: "The grpc-kafka binding's idempotency metadata (default idempotency-key): a call refused because its key names another request says which key."},
	}}
	k.options = &section{def: "kafkaGrpcOptions", fields: []field{
		{name: "acks", schema: ref("acks"), hidden: hiddenRemote, doc: "Acknowledgement mode of the reply records; default in_sync_replicas."},
		{name: "correlation", schema: k.correlation, hidden: hiddenRemote,
			doc: "The headers the grpc-kafka binding writes and reads; the same names and defaults."},
		{name: "idempotency", schema: k.idempotency, hidden: hiddenRemote},
		{name: "max-calls", schema: `{"type": "integer", "minimum": 1, "maximum": 1048576}`, hidden: hiddenRemote,
			doc: "Calls a worker makes to the services at a time; default 256. A call beyond it waits, its records read and held."},
		{name: "max-calls-per-partition", schema: `{"type": "integer", "minimum": 1, "maximum": 1048576}`, hidden: hiddenRemote,
			doc: "Calls of one request partition in flight at a time; default 32, at most max-calls."},
	}}
	k.condition = &section{def: "kafkaGrpcCondition", fields: []field{
		{name: "topic", required: true, schema: ref("topicName"), hidden: hiddenRemote, doc: "The request topic read."},
		{name: "reply-to", required: true, schema: ref("topicName"), hidden: hiddenRemote,
			doc: "The reply topic: a record whose reply-to header names another topic does not match."},
		{name: "method", required: true, hidden: hiddenRemote, doc: "pkg.Service/Method, or pkg.Service/* for any method.",
			schema: `{"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*/([A-Za-z_][A-Za-z0-9_]*|\\*)$"}`},
	}}
	k.with = &section{fields: []field{
		{name: "scheme", required: true, schema: `{"enum": ["http", "https"]}`, hidden: hiddenRemote,
			doc: "http: plaintext HTTP/2 (h2c) to the service; https: TLS."},
		{name: "authority", required: true, schema: `{"type": "string", "pattern": "^\\S+:[0-9]+$"}`, hidden: hiddenRemote,
			doc: "host:port of the gRPC service."},
		{name: "tls", schema: tlsFiles, hidden: hiddenRemote,
			doc: "With scheme https: ca-file (default the system's roots), and cert-file with key-file for mTLS; relative to the file's directory, read at load."},
		{name: "deadline", schema: ref("duration"), hidden: hiddenRemote,
			doc: "Deadline of each attempt at a call, sent to the service as grpc-timeout; default none."},
	}}
	k.route = &section{def: "kafkaGrpcRoute", fields: []field{
		{name: "when", required: true, schema: obj{{"type", "array"}, {"minItems", 1}, {"items", k.condition}}, hidden: hiddenRemote,
			doc: "Conditions, ORed."},
		{name: "exit", required: true, schema: ref("nonEmpty"), hidden: hiddenRemote, doc: "The kafka binding the topics are on."},
		{name: "with", required: true, schema: k.with, hidden: hiddenRemote},
	}}
	k.binding = &section{def: "kafkaGrpcBinding",
		doc: "Calls gRPC services for the request records a grpc-kafka route writes, and writes their replies.",
		fields: []field{
			{name: "type", required: true, schema: `{"const": "kafka-grpc"}`, hidden: hiddenRemote},
			{name: "kind", required: true, schema: `{"const": "remote_server"}`, hidden: hiddenRemote},
			{name: "options", schema: k.options, hidden: hiddenRemote},
			{name: "routes", required: true, schema: obj{{"type", "array"}, {"minItems", 1}, {"items", k.route}}, hidden: hiddenRemote},
		}}
	return k
}

// kafkaGRPCBinding decodes a kafka-grpc binding (pass 2: every kafka
// binding is known).
func (d *decoder) kafkaGRPCBinding(p pendingBinding) *KafkaGRPCBinding {
	k := d.shape.kafkaGRPC
	b := &KafkaGRPCBinding{Name: p.name, Pos: d.pos(p.kn), Acks: AcksInSyncReplicas,
		Correlation: CorrelationHeaders{
			ReplyTo: DefaultReplyToHeader, CorrelationID: DefaultCorrelationIDHeader,
			Service: DefaultServiceHeader, Method: DefaultMethodHeader,
		},
		MaxCalls: DefaultKafkaGRPCMaxCalls, MaxCallsPerPartition: DefaultKafkaGRPCMaxCallsPerPartition,
		IdempotencyMetadata: "idempotency-key"}
	if e := p.m["options"]; e != nil {
		m := d.object(e.v, "options", "kafka-grpc options", k.options.names()...)
		d.kafkaGRPCBounds(m, b)
		if i := m["idempotency"]; i != nil {
			im := d.object(i.v, "idempotency", "kafka-grpc options.idempotency", k.idempotency.names()...)
			if md := im["metadata"]; md != nil {
				if s, ok := d.nonEmpty(md.v, "metadata"); ok {
					b.IdempotencyMetadata = strings.ToLower(s)
				}
			}
		}
		if a := m["acks"]; a != nil {
			if s, ok := d.str(a.v, "acks"); ok {
				switch x := Acks(s); x {
				case AcksNone, AcksLeaderOnly, AcksInSyncReplicas:
					b.Acks = x
				default:
					d.errorf(a.v, "unknown acks %q; allowed: none, leader_only, in_sync_replicas", s)
				}
			}
		}
		if c := m["correlation"]; c != nil {
			d.correlation(c.v, "kafka-grpc", &b.Correlation, k.correlation, d.shape.grpcCorrelationHeaders)
		}
	}
	b.Correlation.defaultStatusNames()
	e := p.m["routes"]
	if e == nil {
		d.errorf(p.kn, "missing required field \"routes\": a kafka-grpc binding needs at least one route naming the topic it reads and the service it calls")
		return b
	}
	if node, items, ok := d.sequence(e.v, "routes"); ok {
		if len(items) == 0 {
			d.errorf(node, "routes must not be empty: a kafka-grpc binding needs at least one route")
		}
		for i, it := range items {
			if it == nil {
				continue
			}
			if r := d.kafkaGRPCRoute(i, it); r != nil {
				b.Routes = append(b.Routes, r)
			}
		}
	}
	return b
}

// kafkaGRPCBounds decodes options.max-calls and max-calls-per-partition.
func (d *decoder) kafkaGRPCBounds(m map[string]*entry, b *KafkaGRPCBinding) {
	bound := func(key string, dst *int) {
		e := m[key]
		if e == nil {
			return
		}
		n, ok := d.integer(e.v, key)
		if !ok {
			return
		}
		if n < 1 || n > 1<<20 {
			d.errorf(e.v, "%s must be 1 to 1048576 calls (got %d)", key, n)
			return
		}
		*dst = int(n)
	}
	bound("max-calls", &b.MaxCalls)
	bound("max-calls-per-partition", &b.MaxCallsPerPartition)
	if e := m["max-calls-per-partition"]; e != nil && b.MaxCallsPerPartition > b.MaxCalls {
		d.errorf(e.v, "max-calls-per-partition (%d) must not exceed max-calls (%d): a partition cannot have more calls in flight than the worker",
			b.MaxCallsPerPartition, b.MaxCalls)
	}
}

func (d *decoder) kafkaGRPCRoute(idx int, n ast.Node) *KafkaGRPCRoute {
	k := d.shape.kafkaGRPC
	node, entries, ok := d.mapping(n, fmt.Sprintf("routes[%d]", idx), "key")
	if !ok {
		return nil
	}
	m := d.fields(entries, "a kafka-grpc route", k.route.names()...)
	r := &KafkaGRPCRoute{Index: idx, Pos: d.pos(node)}
	if e := m["when"]; e != nil {
		if sn, items, ok := d.sequence(e.v, "when"); ok {
			if len(items) == 0 {
				d.errorf(sn, "when must not be empty: name the topic, reply-to and method the route answers")
			}
			for _, it := range items {
				if it != nil {
					r.When = append(r.When, d.kafkaGRPCCondition(it))
				}
			}
		}
	} else {
		d.errorf(node, "missing required field \"when\": name the topic, reply-to and method the route answers")
	}
	if e := m["exit"]; e != nil {
		if s, ok := d.nonEmpty(e.v, "exit"); ok {
			r.Exit = s
			d.checkExit(e.v, s)
		}
	} else {
		d.errorf(node, "missing required field \"exit\": the kafka binding the route's topics are on")
	}
	if e := m["with"]; e != nil {
		d.kafkaGRPCWith(e.v, r)
	} else {
		d.errorf(node, "missing required field \"with\": the scheme and authority of the service to call")
	}
	return r
}

func (d *decoder) kafkaGRPCCondition(n ast.Node) KafkaGRPCCondition {
	c := KafkaGRPCCondition{Pos: d.pos(n)}
	node, entries, ok := d.mapping(n, "when", "key")
	if !ok {
		return c
	}
	m := d.fields(entries, "a kafka-grpc condition", d.shape.kafkaGRPC.condition.names()...)
	topic := func(key string, dst *string) {
		e := m[key]
		if e == nil {
			d.errorf(node, "missing required field %q in a kafka-grpc condition", key)
			return
		}
		if s, ok := d.nonEmpty(e.v, key); ok {
			*dst = s
			d.checkTopic(e.v, Template{Raw: s, Parts: []TemplatePart{{Literal: s}}}, false)
		}
	}
	topic("topic", &c.Topic)
	topic("reply-to", &c.ReplyTo)
	e := m["method"]
	if e == nil {
		d.errorf(node, "missing required field \"method\" in a kafka-grpc condition: pkg.Service/Method, or pkg.Service/* for any method")
		return c
	}
	if s, ok := d.nonEmpty(e.v, "method"); ok {
		if !grpcMethodRe.MatchString(s) {
			d.errorf(e.v, "method %q must be pkg.Service/Method or pkg.Service/* (e.g. example.Echo/*)", s)
		} else {
			c.Method = s
		}
	}
	return c
}

func (d *decoder) kafkaGRPCWith(n ast.Node, r *KafkaGRPCRoute) {
	node, entries, ok := d.mapping(n, "with", "key")
	if !ok {
		return
	}
	m := d.fields(entries, "a kafka-grpc route's with", d.shape.kafkaGRPC.with.names()...)
	if e := m["scheme"]; e == nil {
		d.errorf(node, "missing required field \"scheme\": http (plaintext HTTP/2 to the service) or https (TLS)")
	} else if s, ok := d.str(e.v, "scheme"); ok {
		if s != "http" && s != "https" {
			d.errorf(e.v, "unknown scheme %q; allowed: http (plaintext HTTP/2), https (TLS)", s)
		} else {
			r.Scheme = s
		}
	}
	if r.Scheme == "https" {
		r.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if e := m["tls"]; e != nil {
		if r.Scheme != "https" {
			d.errorf(e.kn, "tls needs scheme https: with scheme http the service is called in plaintext")
		} else if t, ok := d.tlsFiles(e.v, "a kafka-grpc route's with.tls"); ok {
			r.TLS, r.TLSSource = t, e.v.String()
		}
	}
	if e := m["deadline"]; e != nil {
		if v, ok := d.duration(e.v, "deadline", false); ok {
			r.Deadline = v
		}
	}
	e := m["authority"]
	if e == nil {
		d.errorf(node, "missing required field \"authority\": host:port of the gRPC service, e.g. localhost:50051")
		return
	}
	s, ok := d.nonEmpty(e.v, "authority")
	if !ok {
		return
	}
	host, port, err := net.SplitHostPort(s)
	if err == nil {
		if p, perr := strconv.Atoi(port); perr != nil || p < 1 || p > 65535 || host == "" {
			err = fmt.Errorf("port %q is not 1..65535 or the host is empty", port)
		}
	}
	if err != nil {
		d.errorf(e.v, "authority %q must be host:port of the gRPC service, e.g. localhost:50051 (%v)", s, err)
		return
	}
	r.Authority = s
}
