package config

import (
	"errors"
	"strings"
	"testing"
)

// k0 opens every rule snippet: lines 1-2 declare the kafka binding kafka0.
const k0 = "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\"}}\n"

// h0 continues k0 with an http-kafka binding whose routes start on line 6.
const h0 = k0 + "  http0:\n    type: http-kafka\n    kind: proxy\n    routes:\n"

// g0 continues k0 with a grpc-kafka binding whose routes start on line 6.
const g0 = k0 + "  grpc0:\n    type: grpc-kafka\n    kind: proxy\n    routes:\n"

// s0 continues k0 with an sse-kafka binding whose routes start on line 6.
const s0 = k0 + "  sse0:\n    type: sse-kafka\n    kind: proxy\n    routes:\n"

// guard0 is a guards section (3 lines) defining jwt0 with inline keys.
const guard0 = "guards:\n  jwt0:\n    {type: jwt, options: {keys: [{kty: EC, crv: P-256, x: AA, y: AA}]}}\n"

type ruleCase struct {
	name string
	yaml string
	want []string // exact "file:line:col: message" lines
}

// ruleCases holds one case per validation rule of the loader (see Parse),
// each asserting the exact message and position.
var ruleCases = []ruleCase{
	// ---- sse-kafka
	{"sse event id other than the position", s0 + "      - {exit: kafka0, with: {topic: t, event: {id: '[\"${base64(key)}\",\"${etag}\"]'}}}\n",
		[]string{"c.yaml:7:53: event.id \"[\\\"${base64(key)}\\\",\\\"${etag}\\\"]\" is not supported: the event id is ${etag}, the stream's position across every partition, which a reconnect's last-event-id resumes from; remove event.id"}},
	{"sse route with POST", s0 + "      - {when: [{method: POST, path: /e}], exit: kafka0, with: {topic: t}}\n",
		[]string{"c.yaml:7:26: an sse-kafka route answers GET (an EventSource's request): method POST cannot open an event stream"}},
	{"sse with a capability", s0 + "      - {exit: kafka0, with: {capability: fetch, topic: t}}\n",
		[]string{"c.yaml:7:31: unknown field \"capability\" in the with of an sse-kafka route; allowed: topic, topic-pattern, filters, event"}},
	{"sse credentials empty", k0 + "  sse0:\n    type: sse-kafka\n    kind: proxy\n    options: {credentials: {}}\n",
		[]string{"c.yaml:6:28: credentials needs query, cookie or both: where a guarded route's bearer token is read"}},
	// ---- YAML structure
	{"invalid YAML", "bindings: {a: 1", []string{"c.yaml:1:11: invalid YAML: could not find flow mapping end token '}'"}},
	{"empty file", "# nothing\n", []string{"c.yaml:1:1: the file is empty: a configuration needs bindings"}},
	{"two documents", k0 + "---\nbindings: {}\n", []string{"c.yaml:4:1: a configuration file holds one YAML document: remove this second one"}},
	{"top level not a mapping", "- a\n- b\n", []string{"c.yaml:1:1: the file must be a mapping, got a sequence"}},
	{"unknown top-level field", k0 + "listeners: {}\n", []string{"c.yaml:3:1: unknown field \"listeners\" in the top level; allowed: bindings, guards, limits, catalogs"}},
	{"missing bindings", "limits: {max-body: 1MiB}\n", []string{"c.yaml:1:1: missing required field \"bindings\": declare at least one kafka binding and one http-kafka, grpc-kafka or sse-kafka binding"}},
	{"duplicate key", k0 + "limits:\n  max-wait: 10s\n  max-wait: 20s\n", []string{"c.yaml:5:3: duplicate key \"max-wait\": first defined at line 4, column 3"}},
	{"duplicate binding name", k0 + "  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:1\"}}\n", []string{"c.yaml:3:3: duplicate binding name \"kafka0\": first defined at line 2, column 3"}},
	{"undefined alias", k0 + "limits: {max-body: *big}\n", []string{"c.yaml:3:20: alias *big refers to no anchor &big defined before it"}},
	{"merge key", k0 + "limits:\n  <<: {max-body: 1MiB}\n", []string{"c.yaml:4:3: merge keys (<<) are not supported: write the fields out"}},
	{"unsupported tag", k0 + "limits: {max-wait: !duration 10s}\n", []string{"c.yaml:3:20: unsupported YAML tag !duration: write the value without it"}},
	{"wrong type: string expected", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: 123}\n", []string{"c.yaml:8:44: topic must be a string, got an integer: quote it (\"123\")"}},
	{"wrong type: sequence expected", h0 + "      - exit: kafka0\n        when: {method: GET}\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:15: when must be a sequence, got a mapping"}},
	{"wrong type: mapping expected", k0 + "limits: 5\n", []string{"c.yaml:3:9: limits must be a mapping, got an integer"}},

	// ---- bindings
	{"bad binding name", "bindings:\n  \"kafka 0\": {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\"}}\n", []string{"c.yaml:2:3: binding name \"kafka 0\" must start with a letter or digit and use only letters, digits, '.', '_' and '-'"}},
	{"missing binding type", k0 + "  http0: {kind: proxy}\n", []string{"c.yaml:3:10: missing required field \"type\" in binding \"http0\"; allowed values: kafka, http-kafka, grpc-kafka, sse-kafka, kafka-grpc"}},
	{"bad binding type", k0 + "  http0: {type: http, kind: proxy}\n", []string{"c.yaml:3:17: unknown binding type \"http\"; allowed: kafka, http-kafka, grpc-kafka, sse-kafka, kafka-grpc"}},
	{"missing kind", k0 + "  http0: {type: http-kafka}\n", []string{"c.yaml:3:10: missing required field \"kind\": an http-kafka binding has kind proxy"}},
	{"bad kind", k0 + "  http0: {type: http-kafka, kind: client}\n", []string{"c.yaml:3:35: kind of an http-kafka binding must be proxy, got \"client\""}},
	{"unknown binding field", k0 + "  http0: {type: http-kafka, kind: proxy, exit: kafka0}\n", []string{"c.yaml:3:42: unknown field \"exit\" in an http-kafka binding; allowed: type, kind, options, routes"}},
	{"kafka binding with routes", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\"}, routes: []}\n", []string{"c.yaml:2:79: unknown field \"routes\" in a kafka binding; allowed: type, kind, options"}},
	{"kafka binding without options", "bindings:\n  kafka0: {type: kafka, kind: client}\n", []string{"c.yaml:2:11: missing required field \"options\": a kafka binding needs at least options.bootstrap.servers"}},
	{"kafka binding without bootstrap.servers", "bindings:\n  kafka0: {type: kafka, kind: client, options: {linger.ms: 5}}\n", []string{"c.yaml:2:48: missing required property \"bootstrap.servers\": the brokers to connect to, e.g. localhost:9092"}},
	{"empty bootstrap.servers", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"\"}}\n", []string{"c.yaml:2:68: bootstrap.servers must not be empty: list the brokers to connect to, e.g. localhost:9092"}},
	{"message.max.bytes below the limits", "limits: {max-body: 2MiB}\nbindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", message.max.bytes: 1000000}}\n", []string{"c.yaml:3:97: kafka property \"message.max.bytes\" is 1000000 bytes, below limits.max-body (2097152 bytes) plus 131072 bytes for the key and headers: the producer would refuse records of requests the limits let through; remove it (it is then set to 2228224) or lower limits.max-body"}},
	{"kafka property not a scalar", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", sasl: {password: x}}}\n", []string{"c.yaml:2:84: kafka property \"sasl\" must be a string, number or boolean, got a mapping"}},

	// ---- catalogs and topic models
	{"unknown catalog type", k0 + "catalogs:\n  c0: {type: apicurio, options: {}}\n", []string{"c.yaml:4:14: unknown catalog type \"apicurio\"; allowed: inline, filesystem, schema-registry"}},
	{"inline schema that does not compile", "catalogs:\n  c0: {type: inline, options: {subjects: {s: {schema: '{\"type\": }'}}}}\n" +
		"bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", topics: [{name: t, value: {model: json, catalog: {c0: [{subject: s}]}}}]}}\n",
		[]string{"c.yaml:4:127: the schema does not compile: schema c0/s@latest:1:10: invalid character '}' looking for beginning of value"}},
	{"topic model names an unknown catalog", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", topics: [{name: t, value: {model: avro, catalog: {c9: [{subject: s}]}}}]}}\n",
		[]string{"c.yaml:2:128: unknown catalog \"c9\": declare it under catalogs"}},
	{"schema model without catalog", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", topics: [{name: t, value: {model: avro}}]}}\n",
		[]string{"c.yaml:2:104: model avro needs a catalog: catalog: { <catalog name>: [{ subject: <subject> }] }"}},
	{"strategy topic on a glob", "catalogs:\n  r0: {type: schema-registry, options: {url: \"http://r:8081\"}}\n" +
		"bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", topics: [{name: \"t-*\", value: {model: avro, catalog: {r0: [{strategy: topic}]}}}]}}\n",
		[]string{"c.yaml:4:148: strategy topic needs a topic name, not the glob \"t-*\": name the subject instead"}},
	{"avro model on a grpc topic", "catalogs:\n  c0: {type: inline, options: {subjects: {s: {schema: '\"string\"'}}}}\n" +
		"bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", topics: [{name: t, value: {model: avro, catalog: {c0: [{subject: s}]}}}]}}\n" +
		"  grpc0:\n    type: grpc-kafka\n    kind: proxy\n    routes:\n      - exit: kafka0\n        with: {capability: produce, topic: t}\n",
		[]string{"c.yaml:10:15: the value model of topic \"t\" is avro (options.topics, line 4), but grpc-kafka messages are protobuf: give the topic a protobuf model, or route it over http-kafka"}},
	{"avro model on a grpc reply topic", "catalogs:\n  c0: {type: inline, options: {subjects: {s: {schema: '\"string\"'}}}}\n" +
		"bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", topics: [{name: r, value: {model: avro, catalog: {c0: [{subject: s}]}}}]}}\n" +
		"  grpc0:\n    type: grpc-kafka\n    kind: proxy\n    routes:\n      - exit: kafka0\n        with: {capability: produce, topic: t, reply-to: r}\n",
		[]string{"c.yaml:10:15: the value model of topic \"r\" is avro (options.topics, line 4), but grpc-kafka messages are protobuf: give the topic a protobuf model, or route it over http-kafka"}},
	{"view on a primitive", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"k:9092\", topics: [{name: t, key: {model: string, view: json}}]}}\n",
		[]string{"c.yaml:2:124: model string has no view: its values are already text"}},

	// ---- options
	{"bad idempotency header", k0 + "  http0: {type: http-kafka, kind: proxy, options: {idempotency: {header: \"idem key\"}}}\n", []string{"c.yaml:3:74: idempotency.header \"idem key\" is not a valid header name: use letters, digits and '-'"}},
	{"grpc correlation header in http options", k0 + "  http0: {type: http-kafka, kind: proxy, options: {correlation: {headers: {service: s}}}}\n", []string{"c.yaml:3:76: unknown field \"service\" in http-kafka options.correlation.headers; allowed: reply-to, correlation-id"}},
	{"reliability field too small", k0 + "  grpc0: {type: grpc-kafka, kind: proxy, options: {reliability: {field: 0}}}\n", []string{"c.yaml:3:73: reliability.field 0 is not a protobuf field number: use 1..536870911 (default 32767)"}},
	{"reliability field too large", k0 + "  grpc0: {type: grpc-kafka, kind: proxy, options: {reliability: {field: 536870912}}}\n", []string{"c.yaml:3:73: reliability.field 536870912 is not a protobuf field number: use 1..536870911 (default 32767)"}},
	{"reliability field reserved", k0 + "  grpc0: {type: grpc-kafka, kind: proxy, options: {reliability: {field: 19500}}}\n", []string{"c.yaml:3:73: reliability.field 19500 is in 19000..19999, reserved by protobuf: use another number (default 32767)"}},

	// ---- routes
	{"unknown route field", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t}\n        priority: 1\n", []string{"c.yaml:9:9: unknown field \"priority\" in an http-kafka route; allowed: id, guarded, when, exit, with"}},
	{"misspelt field", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, reply_to: r}\n", []string{"c.yaml:8:47: unknown field \"reply_to\" in the with of an http-kafka produce route (did you mean \"reply-to\"?); allowed: capability, topic, topic-pattern, acks, key, overrides, reply-to, async"}},
	{"missing exit", h0 + "      - with: {capability: produce, topic: t}\n", []string{"c.yaml:7:9: missing required field \"exit\": name the kafka binding this route uses"}},
	{"exit names no binding", h0 + "      - exit: kafka1\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:7:15: exit \"kafka1\" names no kafka binding (declared: kafka0)"}},
	{"exit names a proxy binding", h0 + "      - exit: http0\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:7:15: exit \"http0\" is an http-kafka binding: exit must name a kafka binding (declared: kafka0)"}},
	{"http route without with", h0 + "      - exit: kafka0\n        when: [{method: GET, path: /items}]\n", []string{"c.yaml:7:9: missing required field \"with\": give the route's capability (fetch or produce) and topic"}},
	{"grpc route without with", g0 + "      - exit: kafka0\n        when: [{service: example.v1.Items}]\n", []string{"c.yaml:7:9: missing required field \"with\": give the route's capability (fetch or produce) and topic"}},
	{"undefined guard", h0 + "      - exit: kafka0\n        guarded: {jwt1: [read]}\n        with: {capability: produce, topic: t}\n" + guard0, []string{"c.yaml:8:19: guard \"jwt1\" is not defined; defined guards: jwt0"}},
	{"guard roles null", h0 + "      - exit: kafka0\n        guarded: {jwt0: }\n        with: {capability: produce, topic: t}\n" + guard0, []string{"c.yaml:8:24: roles of guard \"jwt0\" must be a sequence of strings ([] for none), got nothing (null)"}},

	// ---- conditions
	{"bad method", h0 + "      - exit: kafka0\n        when: [{method: FETCH}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:25: unknown method \"FETCH\"; allowed: GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, PATCH"}},
	{"lower-case method", h0 + "      - exit: kafka0\n        when: [{method: post}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:25: method \"post\" must be upper case: POST"}},
	{"method CONNECT", h0 + "      - exit: kafka0\n        when: [{method: CONNECT}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:25: method CONNECT cannot be routed: a CONNECT request has no path, and the processor answers it 404"}},
	{"grpc field in http condition", h0 + "      - exit: kafka0\n        when: [{service: example.v1.Items}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:17: unknown field \"service\" in an http-kafka condition; allowed: method, path"}},
	{"http field in grpc condition", g0 + "      - exit: kafka0\n        when: [{path: /items}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:17: unknown field \"path\" in a grpc-kafka condition; allowed: method, service, metadata"}},
	{"path without leading slash", h0 + "      - exit: kafka0\n        when: [{path: items}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: path \"items\" must start with \"/\""}},
	{"path unbalanced open brace", h0 + "      - exit: kafka0\n        when: [{path: \"/items/{id\"}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: unbalanced \"{\" in path \"/items/{id\": write parameters as {name}"}},
	{"path unbalanced close brace", h0 + "      - exit: kafka0\n        when: [{path: \"/items/id}\"}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: unbalanced \"}\" in path \"/items/id}\": write parameters as {name}"}},
	{"path empty parameter", h0 + "      - exit: kafka0\n        when: [{path: \"/items/{}\"}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: empty parameter {} in path \"/items/{}\": name it, e.g. {id}"}},
	{"path duplicate parameter", h0 + "      - exit: kafka0\n        when: [{path: \"/a/{id}/b/{id}\"}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: duplicate parameter {id} in path \"/a/{id}/b/{id}\": each name may appear once"}},
	{"path adjacent parameters", h0 + "      - exit: kafka0\n        when: [{path: \"/a/{x}{y}\"}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: parameters {x} and {y} in path \"/a/{x}{y}\" need a literal between them"}},
	{"path with query string", h0 + "      - exit: kafka0\n        when: [{path: \"/items?all\"}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: path \"/items?all\" must not contain \"?\": paths are matched without the query string"}},
	{"path with wildcard", h0 + "      - exit: kafka0\n        when: [{path: \"/items/*\"}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:23: path \"/items/*\" must not contain \"*\": wildcards are not supported; use a {name} parameter for a segment"}},
	{"grpc method shape", g0 + "      - exit: kafka0\n        when: [{method: /example.v1.Items/Get}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:25: gRPC method \"/example.v1.Items/Get\" must be shaped <package>.<Service>/<Method> or <package>.<Service>/* (no leading \"/\")"}},
	{"grpc service shape", g0 + "      - exit: kafka0\n        when: [{service: example.v1.Items/Get}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:26: gRPC service \"example.v1.Items/Get\" must be a fully qualified service name such as example.v1.Items"}},
	{"grpc service contradicts method", g0 + "      - exit: kafka0\n        when: [{method: a.B/C, service: a.D}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:41: service \"a.D\" contradicts method \"a.B/C\": the condition could never match; keep one of them"}},
	{"bad base64", g0 + "      - exit: kafka0\n        when: [{service: a.B, metadata: {trace-bin: {base64: \"@@\"}}}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:62: metadata \"trace-bin\": \"@@\" is not valid base64 (standard alphabet, padding optional)"}},
	{"string for binary metadata", g0 + "      - exit: kafka0\n        when: [{service: a.B, metadata: {trace-bin: AQID}}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:53: metadata \"trace-bin\" is binary: give its value as {base64: ...}"}},
	{"unknown field in base64 value", g0 + "      - exit: kafka0\n        when: [{service: a.B, metadata: {trace-bin: {base64: AQID, hex: \"01\"}}}]\n        with: {capability: produce, topic: t}\n", []string{"c.yaml:8:68: unknown field \"hex\" in a binary metadata value; allowed: base64"}},

	// ---- with
	{"missing capability", h0 + "      - exit: kafka0\n        with: {topic: t}\n", []string{"c.yaml:8:15: missing required field \"capability\" in with; allowed values: fetch, produce"}},
	{"bad capability", h0 + "      - exit: kafka0\n        with: {capability: consume, topic: t}\n", []string{"c.yaml:8:28: unknown capability \"consume\"; allowed: fetch, produce"}},
	{"missing topic", h0 + "      - exit: kafka0\n        with: {capability: produce}\n", []string{"c.yaml:8:15: missing required field \"topic\": the Kafka topic of this route"}},
	{"field of the other capability", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, merge: {}}\n", []string{"c.yaml:8:47: unknown field \"merge\" in the with of an http-kafka produce route; allowed: capability, topic, topic-pattern, acks, key, overrides, reply-to, async"}},
	{"http-only field in grpc with", g0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, async: {location: /x}}\n", []string{"c.yaml:8:47: unknown field \"async\" in the with of a grpc-kafka produce route; allowed: capability, topic, topic-pattern, acks, key, overrides, reply-to"}},
	{"bad acks", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, acks: all}\n", []string{"c.yaml:8:53: unknown acks \"all\"; allowed: none, leader_only, in_sync_replicas"}},
	{"fetch without filters or merge", h0 + "      - exit: kafka0\n        when: [{method: GET, path: /items}]\n        with: {capability: fetch, topic: t}\n", []string{"c.yaml:9:15: a fetch route needs filters (records selected by key or headers) or merge (all records as one JSON array)"}},
	{"fetch with POST", h0 + "      - exit: kafka0\n        when: [{method: POST, path: /items}]\n        with: {capability: fetch, topic: t, merge: {}}\n", []string{"c.yaml:8:25: a fetch route answers GET and HEAD: method POST cannot fetch"}},
	{"merge content-type", h0 + "      - exit: kafka0\n        with: {capability: fetch, topic: t, merge: {content-type: text/plain}}\n", []string{"c.yaml:8:67: merge.content-type must be application/json, got \"text/plain\""}},
	{"merge patch initial", h0 + "      - exit: kafka0\n        with: {capability: fetch, topic: t, merge: {patch: {initial: {}, path: /-}}}\n", []string{"c.yaml:8:70: merge.patch.initial must be [] (an empty JSON array), got a mapping"}},
	{"merge patch initial string", h0 + "      - exit: kafka0\n        with: {capability: fetch, topic: t, merge: {patch: {initial: \"[1]\", path: /-}}}\n", []string{"c.yaml:8:70: merge.patch.initial must be [] (an empty JSON array), got \"[1]\""}},
	{"merge patch path", h0 + "      - exit: kafka0\n        with: {capability: fetch, topic: t, merge: {patch: {initial: [], path: /0}}}\n", []string{"c.yaml:8:80: merge.patch.path must be \"/-\" (append each record), got \"/0\""}},
	{"merge patch incomplete", h0 + "      - exit: kafka0\n        with: {capability: fetch, topic: t, merge: {patch: {initial: []}}}\n", []string{"c.yaml:8:60: missing required field \"path\" in merge.patch: it must be \"/-\""}},
	{"empty filters", h0 + "      - exit: kafka0\n        with: {capability: fetch, topic: t, filters: []}\n", []string{"c.yaml:8:54: filters must not be empty: add a filter with key or headers, or remove filters"}},
	{"empty filter", h0 + "      - exit: kafka0\n        with: {capability: fetch, topic: t, filters: [{}]}\n", []string{"c.yaml:8:55: a filter needs key, headers or both"}},
	{"templated topic without topic-pattern", h0 + "      - exit: kafka0\n        when: [{method: GET, path: \"/t/{name}\"}]\n        with: {capability: fetch, topic: \"t-${params.name}\", merge: {}}\n", []string{"c.yaml:9:42: topic \"t-${params.name}\" is templated: add topic-pattern, a glob every resolved name must match (e.g. \"items-*\")"}},
	{"bad topic-pattern", h0 + "      - exit: kafka0\n        when: [{method: GET, path: \"/t/{name}\"}]\n        with: {capability: fetch, topic: \"t-${params.name}\", topic-pattern: \"t-[\", merge: {}}\n", []string{"c.yaml:9:77: topic-pattern \"t-[\" is not a valid glob: use *, ? and [...] classes"}},
	{"internal topic", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: __consumer_offsets}\n", []string{"c.yaml:8:44: topic \"__consumer_offsets\" starts with \"_\": such names are internal to Kafka and always refused"}},
	{"invalid topic name", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: \"items/requests\"}\n", []string{"c.yaml:8:44: \"items/requests\" is not a valid Kafka topic name: use up to 249 letters, digits, '.', '_' and '-'"}},
	{"invalid reply-to", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, reply-to: \"${params.x}\"}\n", []string{"c.yaml:8:57: ${params.x} cannot be used in reply-to: only ${env:NAME} and ${file:PATH} are resolved there"}},
	{"empty key", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"\"}\n", []string{"c.yaml:8:52: key must not be empty: omit it for records without a key"}},

	// ---- async and follow-ups
	{"async without correlationId in location", h0 + "      - exit: kafka0\n        when: [{method: POST, path: /items}]\n        with: {capability: produce, topic: t, reply-to: r, async: {location: /items}}\n", []string{"c.yaml:9:78: async location must contain ${correlationId}: the client fetches the reply there"}},
	{"async without location", h0 + "      - exit: kafka0\n        when: [{method: POST, path: /items}]\n        with: {capability: produce, topic: t, reply-to: r, async: {retry-after: \"5\"}}\n", []string{"c.yaml:9:67: async needs a location containing ${correlationId}, e.g. location: /items/${params.id};cid=${correlationId}"}},
	{"async without reply-to", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, async: {location: \"/r;cid=${correlationId}\"}}\n", []string{"c.yaml:8:47: async needs reply-to: the reply the client fetches later is read from that topic"}},
	{"correlationId outside GET", h0 + "      - exit: kafka0\n        when: [{method: PUT, path: \"/items/{id};cid={correlationId}\"}]\n        with: {capability: produce, topic: t, reply-to: r, async: {location: \"/items/${params.id};cid=${correlationId}\"}}\n", []string{"c.yaml:8:36: {correlationId} may only appear in a GET condition of a produce route with reply-to and async (the follow-up of an async request)"}},
	{"correlationId without async", h0 + "      - exit: kafka0\n        when: [{method: GET, path: \"/items/{id};cid={correlationId}\"}]\n        with: {capability: produce, topic: t, reply-to: r}\n", []string{"c.yaml:8:36: {correlationId} may only appear in a GET condition of a produce route with reply-to and async (the follow-up of an async request)"}},
	{"correlationId on a fetch route", h0 + "      - exit: kafka0\n        when: [{method: GET, path: \"/r/{correlationId}\"}]\n        with: {capability: fetch, topic: t, merge: {}}\n", []string{"c.yaml:8:36: {correlationId} may only appear in a GET condition of a produce route with reply-to and async (the follow-up of an async request)"}},

	// ---- templates
	{"param not in every path", h0 + "      - exit: kafka0\n        when: [{method: PUT, path: \"/items/{id}\"}, {method: POST, path: /items}]\n        with: {capability: produce, topic: t, key: \"${params.id}\"}\n", []string{"c.yaml:9:52: ${params.id} in key is not defined by every when path of this route: \"/items\" (line 8) has no {id}"}},
	{"param in a condition without path", h0 + "      - exit: kafka0\n        when: [{method: PUT, path: \"/items/{id}\"}, {method: POST}]\n        with: {capability: produce, topic: t, key: \"${params.id}\"}\n", []string{"c.yaml:9:52: ${params.id} in key is not defined by every when path of this route: the condition at line 8 has no path"}},
	{"param without when", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${params.id}\"}\n", []string{"c.yaml:8:52: ${params.id} in key needs a when path with {id}: this route has no when conditions"}},
	{"param in grpc route", g0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${params.id}\"}\n", []string{"c.yaml:8:52: ${params.id} cannot be used in a grpc-kafka route: gRPC calls have no path parameters"}},
	{"unknown reference", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${requestId}\"}\n", []string{"c.yaml:8:52: key: unknown reference ${requestId}: use ${params.<name>}, ${idempotencyKey}, ${correlationId}, ${guarded['<guard>'].identity}, ${env:<NAME>} or ${file:<path>}"}},
	{"unterminated reference", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${idempotencyKey\"}\n", []string{"c.yaml:8:52: key: unterminated \"${\" in \"${idempotencyKey\": close the reference with \"}\""}},
	{"malformed guard reference", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${guarded[jwt0].identity}\"}\n", []string{"c.yaml:8:52: key: malformed reference ${guarded[jwt0].identity}: write ${guarded['<guard>'].identity}"}},
	{"bad parameter reference name", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${params.1d}\"}\n", []string{"c.yaml:8:52: key: bad parameter name in ${params.1d}: a name is letters, digits and '_', not starting with a digit"}},
	{"correlationId in key", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${correlationId}\"}\n", []string{"c.yaml:8:52: ${correlationId} cannot be used in key: it may reference ${params.<name>}, ${idempotencyKey}, ${guarded['<guard>'].identity}"}},
	{"idempotencyKey in topic", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: \"t-${idempotencyKey}\", topic-pattern: \"t-*\"}\n", []string{"c.yaml:8:44: ${idempotencyKey} cannot be used in topic: it may reference ${params.<name>}, ${guarded['<guard>'].identity}"}},
	{"idempotencyKey in async", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, reply-to: r, async: {location: \"/r/${idempotencyKey};cid=${correlationId}\"}}\n", []string{"c.yaml:8:78: ${idempotencyKey} cannot be used in async location: it may reference ${params.<name>}, ${correlationId}"}},
	{"reference in a plain field", k0 + "  http0: {type: http-kafka, kind: proxy, options: {idempotency: {header: \"${params.h}\"}}}\n", []string{"c.yaml:3:74: ${params.h} cannot be used in idempotency.header: only ${env:NAME} and ${file:PATH} are resolved there"}},
	{"guard identity of undefined guard", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${guarded['jwt1'].identity}\"}\n" + guard0, []string{"c.yaml:8:52: ${guarded['jwt1'].identity} in key names guard \"jwt1\", which is not defined"}},
	{"guard identity of unlisted guard", h0 + "      - exit: kafka0\n        with: {capability: produce, topic: t, key: \"${guarded['jwt0'].identity}\"}\n" + guard0, []string{"c.yaml:8:52: ${guarded['jwt0'].identity} in key names guard \"jwt0\", which this route does not list in guarded"}},
	{"unset environment variable", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: \"${env:NO_SUCH_VAR}\"}}\n", []string{"c.yaml:2:68: environment variable NO_SUCH_VAR is not set (referenced by ${env:NO_SUCH_VAR} in bootstrap.servers)"}},
	{"missing file reference", "bindings:\n  kafka0: {type: kafka, kind: client, options: {bootstrap.servers: k, sasl.password: \"${file:no-such-secret}\"}}\n", []string{"c.yaml:2:86: ${file:no-such-secret} in sasl.password: cannot read no-such-secret: no such file or directory"}},

	// ---- guards
	{"bad guard name", k0 + "guards:\n  \"jwt'0\": {type: envoy-jwt, options: {provider: p}}\n", []string{"c.yaml:4:3: guard name \"jwt'0\" must start with a letter or digit and use only letters, digits, '.', '_' and '-'"}},
	{"bad guard type", k0 + "guards:\n  jwt0: {type: oauth, options: {}}\n", []string{"c.yaml:4:16: unknown guard type \"oauth\"; allowed: jwt, envoy-jwt"}},
	{"jwt guard without options", k0 + "guards:\n  jwt0: {type: jwt}\n", []string{"c.yaml:4:9: missing required field \"options\": a jwt guard needs at least keys or keys-file"}},
	{"jwt guard without keys", k0 + "guards:\n  jwt0: {type: jwt, options: {issuer: i}}\n", []string{"c.yaml:4:30: missing required field \"keys\" or \"keys-file\": the JWKS that verifies tokens"}},
	{"jwt guard with keys and keys-file", k0 + "guards:\n  jwt0: {type: jwt, options: {keys: [{kty: EC}], keys-file: jwks.json}}\n", []string{"c.yaml:4:50: give keys or keys-file, not both"}},
	{"missing keys-file", k0 + "guards:\n  jwt0: {type: jwt, options: {keys-file: no-such-jwks.json}}\n", []string{"c.yaml:4:42: keys-file: cannot read no-such-jwks.json: no such file or directory"}},
	{"key without kty", k0 + "guards:\n  jwt0: {type: jwt, options: {keys: [{kid: a}]}}\n", []string{"c.yaml:4:37: keys: key 0 has no \"kty\" (RSA, EC, OKP or oct)"}},
	{"keys string not a JWKS", k0 + "guards:\n  jwt0: {type: jwt, options: {keys: \"{\\\"keys\\\": 1}\"}}\n", []string{"c.yaml:4:37: keys: not a JWKS document: expected {\"keys\": [...]}"}},
	{"algorithm none", k0 + "guards:\n  jwt0: {type: jwt, options: {keys: [{kty: EC}], algorithms: [none]}}\n", []string{"c.yaml:4:63: algorithm none is never accepted: tokens must be signed"}},
	{"unknown algorithm", k0 + "guards:\n  jwt0: {type: jwt, options: {keys: [{kty: EC}], algorithms: [RS1]}}\n", []string{"c.yaml:4:63: unknown algorithm \"RS1\"; allowed: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA, HS256, HS384, HS512"}},
	{"envoy-jwt without provider", k0 + "guards:\n  e: {type: envoy-jwt, options: {roles-claim: scope}}\n", []string{"c.yaml:4:33: missing required field \"provider\": the jwt_authn provider whose payload Envoy forwards (payload_in_metadata)"}},
	{"jwt field in envoy-jwt guard", k0 + "guards:\n  e: {type: envoy-jwt, options: {provider: p, issuer: i}}\n", []string{"c.yaml:4:47: unknown field \"issuer\" in envoy-jwt guard options; allowed: provider, roles-claim, identity-claim"}},
	{"bad skew", k0 + "guards:\n  jwt0: {type: jwt, options: {keys: [{kty: EC}], skew: soon}}\n", []string{"c.yaml:4:56: skew: invalid duration \"soon\": use a number with a unit: ms, s, m or h (e.g. 30s, 1m30s)"}},

	// ---- limits
	{"unknown limit", k0 + "limits: {max-bodies: 1MiB}\n", []string{"c.yaml:3:10: unknown field \"max-bodies\" in limits; allowed: max-body, max-wait, reply-timeout, reply-retention, kafka-timeout, max-view-bytes, reply-index-bytes, max-views, view-idle, stream-lag-budget, stream-send-interval, stream-send-rate, idempotency-window, idempotency-keys, sse-heartbeat, sse-retry"}},
	{"bad size", k0 + "limits: {max-body: 1 megabyte}\n", []string{"c.yaml:3:20: max-body: invalid size \"1 megabyte\": use a number of bytes or a number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 512KiB, 1MiB)"}},
	{"fractional bytes", k0 + "limits: {max-body: 1.5B}\n", []string{"c.yaml:3:20: max-body: invalid size \"1.5B\": it is not a whole number of bytes"}},
	{"zero size", k0 + "limits: {max-body: 0}\n", []string{"c.yaml:3:20: max-body must be positive, got 0"}},
	{"bad duration", k0 + "limits: {max-wait: 1 minute}\n", []string{"c.yaml:3:20: max-wait: invalid duration \"1 minute\": use a number with a unit: ms, s, m or h (e.g. 30s, 1m30s)"}},
	{"duration without unit", k0 + "limits: {reply-timeout: 30}\n", []string{"c.yaml:3:25: reply-timeout: invalid duration \"30\": add a unit: ms, s, m or h (e.g. 30s)"}},
	{"negative duration", k0 + "limits: {kafka-timeout: -5s}\n", []string{"c.yaml:3:25: kafka-timeout must be positive, got -5s"}},
	{"zero count", k0 + "limits: {max-views: 0}\n", []string{"c.yaml:3:21: max-views must be between 1 and 2147483647, got 0"}},

	// ---- several mistakes at once, in file order
	{"every mistake in file order", h0 + "      - exit: kafka9\n        with: {capability: produce, topic: t, acks: all}\n      - exit: kafka0\n" + "limits: {max-body: lots}\n", []string{
		"c.yaml:7:15: exit \"kafka9\" names no kafka binding (declared: kafka0)",
		"c.yaml:8:53: unknown acks \"all\"; allowed: none, leader_only, in_sync_replicas",
		"c.yaml:9:9: missing required field \"with\": give the route's capability (fetch or produce) and topic",
		"c.yaml:10:20: max-body: invalid size \"lots\": use a number of bytes or a number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 512KiB, 1MiB)",
	}},
}

func TestRules(t *testing.T) {
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tc.yaml), func(string) (string, bool) { return "", false })
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v, want Errors", err)
			}
			got := strings.Split(errs.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// Zilla names binary metadata without -bin (its gRPC server strips it): a
// {base64: ...} value on such a name is the <name>-bin metadata.
func TestBase64MetadataWithoutBinSuffix(t *testing.T) {
	yaml := g0 + "      - exit: kafka0\n        when: [{service: a.B, metadata: {custom-binary: {base64: AQID}}}]\n        with: {capability: produce, topic: t}\n"
	cfg, err := Parse("c.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	md := cfg.Bindings[0].Routes[0].When[0].Metadata
	if len(md) != 1 || md[0].Name != "custom-binary-bin" || string(md[0].Value) != "\x01\x02\x03" || !md[0].Binary {
		t.Fatalf("metadata %+v, want custom-binary-bin = 01 02 03", md)
	}
}

// The status and message headers follow the correlation-id header's prefix
// unless named, so a responder written for Zilla (zilla:*) needs one setting.
func TestStatusHeadersFollowCorrelationPrefix(t *testing.T) {
	for _, tc := range []struct{ headers, status, message string }{
		{"{}", "gateway:status", "gateway:message"},
		{"{correlation-id: zilla:correlation-id}", "zilla:status", "zilla:message"},
		{"{correlation-id: cid}", "gateway:status", "gateway:message"},
		{"{correlation-id: a:b:cid, message: why}", "a:b:status", "why"},
		{"{status: s, message: m}", "s", "m"},
	} {
		yaml := k0 + "  grpc0:\n    type: grpc-kafka\n    kind: proxy\n    options: {correlation: {headers: " + tc.headers + "}}\n" +
			"    routes:\n      - exit: kafka0\n        with: {capability: produce, topic: t, reply-to: r}\n"
		cfg, err := Parse("c.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%s: %v", tc.headers, err)
		}
		if c := cfg.Bindings[0].GRPC.Correlation; c.Status != tc.status || c.Message != tc.message {
			t.Errorf("%s: status %q message %q, want %q %q", tc.headers, c.Status, c.Message, tc.status, tc.message)
		}
	}
}
