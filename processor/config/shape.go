package config

// The shape of the configuration file, defined once. The decoder takes the
// fields each object allows from here (its "unknown field ...; allowed: ..."
// lists), Schema renders the JSON Schema from it, and describe_test.go holds
// Describe to it. A new field is one entry here, its field in the model and
// the code that reads (and prints) it; docs/architecture.md ("A
// configuration field") lists every step.

// shape is every section of the file. The decoder holds one for a load.
type shape struct {
	top *section

	binding                                            *union
	kafkaBinding, httpBinding, grpcBinding, sseBinding *section
	kafkaOptions, topicEntry, viewStore                *section
	topicModel, catalogRef                             *section

	httpOptions, httpIdempotency, httpCorrelation, httpCorrelationHeaders                  *section
	grpcOptions, grpcIdempotency, grpcReliability, grpcCorrelation, grpcCorrelationHeaders *section
	sseOptions, sseCredentials                                                             *section

	httpRoute, grpcRoute, sseRoute, httpCondition, grpcCondition, binaryMetadata *section

	httpWith, grpcWith                                *union
	httpFetch, httpProduce, grpcFetch, grpcProduce    *section
	sseWith, sseEvent                                 *section
	httpFilter, grpcFilter, merge, mergePatch         *section
	guard                                             *union
	jwtGuard, envoyJWTGuard, jwtOptions, envoyOptions *section

	limits *section

	kafkaGRPC *kafkaGRPCShape // the kafka-grpc binding (kafkagrpc.go)

	catalog                              *section
	catalogTypes                         []variant // the options section of each catalog type
	inlineOptions, inlineSubject         *section
	filesystemOptions, filesystemSubject *section
	registryOptions, registryTLS         *section
	values                               []*named // value schemas the sections refer to by name
}

// ref is the JSON of a reference to a named schema.
func ref(name string) js { return js(`{"$ref": "#/$defs/` + name + `"}`) }

// byName is an object of named entries, each value v.
func byName(v any) obj {
	return obj{{"type", "object"}, {"propertyNames", ref("name")}, {"additionalProperties", v}}
}

// enumOrLoadRef is one of values, or a whole ${env:...} or ${file:...}.
func enumOrLoadRef(values []string) obj {
	return obj{{"anyOf", arr{obj{{"enum", strs(values)}}, ref("loadRef")}}}
}

// headerPattern is a header or metadata name: an HTTP token.
const headerPattern = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"

// hiddenCredentials is why Describe leaves out where an sse-kafka binding
// reads tokens.
const hiddenCredentials = "where a token is read: it does not change which route a request takes"

// hiddenOptions is why Describe leaves out a proxy binding's options.
const hiddenOptions = "header and metadata names the binding writes and reads: they do not change which route a request takes"

func newShape() *shape {
	s := &shape{}
	s.values = valueSchemas()
	s.catalogSections()
	s.kafkaSections()
	s.optionSections()
	s.withSections()
	s.routeSections()
	s.guardSections()
	s.limits = limitsSection()
	s.kafkaGRPC = newKafkaGRPCShape(s.grpcCorrelationHeaders, s.registryTLS)
	s.binding = &union{def: "binding", key: "type", required: []string{"type", "kind"}, variants: []variant{
		{"kafka", s.kafkaBinding}, {"http-kafka", s.httpBinding}, {"grpc-kafka", s.grpcBinding}, {"sse-kafka", s.sseBinding},
		{KafkaGRPCType, s.kafkaGRPC.binding},
	}}
	s.top = &section{
		doc: "One YAML file: kafka client bindings, http-kafka, grpc-kafka and sse-kafka proxy bindings with their routes, guards and limits. " +
			"Any string value may hold ${env:NAME} or ${file:PATH}, resolved at load. The loader (kafka-ext-proc validate) also checks " +
			"what a schema cannot: references between bindings, guards and path parameters.",
		fields: []field{
			{name: "bindings", required: true, schema: byName(s.binding), shown: "BINDING",
				doc: "Bindings by name: kafka clusters (type kafka) and the proxies routing to them (http-kafka, grpc-kafka, sse-kafka); kafka-grpc bindings call gRPC services for the records grpc-kafka writes."},
			{name: "guards", schema: byName(s.guard), shown: "GUARD", doc: "Guards by name, referenced by routes in guarded."},
			{name: "limits", schema: s.limits, shown: "LIMITS"},
			{name: "catalogs", schema: byName(s.catalog),
				doc:    "Schema catalogs by name, referenced by topic models: inline, filesystem or a Confluent-compatible schema-registry.",
				hidden: "where topic models find their schemas: Describe prints the routes, not what records must be"},
		},
	}
	return s
}

func (s *shape) kafkaSections() {
	s.topicEntry = &section{fields: []field{
		{name: "name", required: true, schema: `{"type": "string", "minLength": 1}`},
		{name: "key", schema: s.topicModel},
		{name: "value", schema: s.topicModel},
		{name: "view-store", schema: `{"enum": ["memory", "disk"]}`,
			doc: "Where this topic's view is kept: memory, or disk (in the binding's view-store directory); default the binding's view-store type."},
	}}
	s.viewStore = &section{fields: []field{
		{name: "type", schema: `{"enum": ["memory", "disk"]}`,
			doc: "memory (default): every view in the heap, bounded by limits.max-view-bytes; disk: every view in an embedded store on local disk, bounded by the disk and kept across restarts."},
		{name: "directory", schema: `{"type": "string", "minLength": 1}`,
			doc: "Where the views on disk are kept (one directory per binding and topic beneath); required when a view is on disk."},
	}}
	s.kafkaOptions = &section{
		doc:  "librdkafka properties (bootstrap.servers, security.protocol, sasl.*, ssl.*, ...).",
		open: true,
		keywords: `{"anyOf": [{"required": ["bootstrap.servers"]}, {"required": ["metadata.broker.list"]}],
			"additionalProperties": {"type": ["string", "number", "boolean"]}}`,
		fields: []field{
			{name: "bootstrap.servers", schema: `{"type": "string", "minLength": 1}`, shown: "BOOTSTRAP SERVERS"},
			{name: "metadata.broker.list", schema: `{"type": "string", "minLength": 1}`, shown: "BOOTSTRAP SERVERS"},
			{name: "view-store", schema: s.viewStore,
				doc:    "Where the views of this cluster's topics are kept (not a librdkafka property): memory or disk.",
				hidden: "where views are kept: it does not change which route a request takes"},
			{name: "topics", schema: obj{{"type", "array"}, {"items", s.topicEntry}},
				doc:    "Topic models (not a librdkafka property): per topic or glob, the key and value models.",
				hidden: "what a topic's records must be: Describe prints the routes, not the models"},
		},
	}
	s.kafkaBinding = &section{def: "kafkaBinding", doc: "A Kafka cluster; routes name it in exit.", fields: []field{
		{name: "type", required: true, schema: `{"const": "kafka"}`, shown: "KAFKA"},
		{name: "kind", required: true, schema: `{"const": "client"}`, hidden: "always client"},
		{name: "options", required: true, schema: s.kafkaOptions, shown: "BOOTSTRAP SERVERS"},
	}}
}

func (s *shape) catalogSections() {
	s.catalogRef = &section{fields: []field{
		{name: "subject", schema: `{"type": "string", "minLength": 1}`},
		{name: "version", schema: `{"oneOf": [{"const": "latest"}, {"type": "integer", "minimum": 1}]}`},
		{name: "id", schema: `{"type": "integer", "minimum": 1}`},
		{name: "strategy", schema: `{"const": "topic"}`},
		{name: "record", schema: `{"type": "string"}`},
	}}
	s.topicModel = &section{
		def: "topicModel",
		doc: "What a topic's keys or values must be; view json converts (JSON outside, the model's format in Kafka).",
		fields: []field{
			{name: "model", required: true, schema: obj{{"enum", strs(modelNames())}}},
			{name: "view", schema: `{"const": "json"}`},
			{name: "catalog", schema: obj{
				{"type", "object"}, {"minProperties", 1}, {"maxProperties", 1},
				{"additionalProperties", obj{{"type", "array"}, {"minItems", 1}, {"maxItems", 1}, {"items", s.catalogRef}}},
			}},
			{name: "frame", schema: `{"type": "boolean"}`},
			{name: "min-length", schema: `{"type": "integer", "minimum": 0}`},
			{name: "max-length", schema: `{"type": "integer", "minimum": 0}`},
			{name: "pattern", schema: `{"type": "string"}`},
		},
	}
	s.inlineSubject = &section{fields: []field{{name: "schema", required: true, schema: `{"type": "string", "minLength": 1}`}}}
	s.filesystemSubject = &section{fields: []field{{name: "path", required: true, schema: `{"type": "string", "minLength": 1}`}}}
	subjects := func(subject *section) *section {
		return &section{fields: []field{
			{name: "subjects", required: true, schema: obj{{"type", "object"}, {"additionalProperties", subject}}},
		}}
	}
	s.registryTLS = &section{fields: []field{
		{name: "ca-file", schema: `{"type": "string"}`},
		{name: "cert-file", schema: `{"type": "string"}`},
		{name: "key-file", schema: `{"type": "string"}`},
	}}
	duration := `{"type": ["string", "number"]}`
	s.registryOptions = &section{fields: []field{
		{name: "url", required: true, schema: `{"oneOf": [{"type": "string", "pattern": "^https?://"},
			{"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^https?://"}}]}`},
		{name: "username", schema: `{"type": "string"}`},
		{name: "password", schema: `{"type": "string"}`},
		{name: "token", schema: `{"type": "string"}`},
		{name: "tls", schema: s.registryTLS},
		{name: "context", schema: `{"type": "string"}`},
		{name: "max-age", schema: duration},
		{name: "timeout", schema: duration},
		{name: "retry-after", schema: duration},
	}}
	s.inlineOptions, s.filesystemOptions = subjects(s.inlineSubject), subjects(s.filesystemSubject)
	s.catalogTypes = []variant{
		{"inline", s.inlineOptions},
		{"filesystem", s.filesystemOptions},
		{"schema-registry", s.registryOptions},
	}
	// The type selects the options' shape; the loader reports unknown
	// fields of a catalog whatever its type, so the object is one section.
	var byType arr
	for _, v := range s.catalogTypes {
		byType = append(byType, obj{
			{"if", obj{{"properties", obj{{"type", obj{{"const", v.value}}}}}}},
			{"then", obj{{"properties", obj{{"options", v.section}}}}},
		})
	}
	s.catalog = &section{def: "catalog", keywords: obj{{"allOf", byType}}, fields: []field{
		{name: "type", required: true, schema: obj{{"enum", strs(variantValues(s.catalogTypes))}}},
		{name: "options", required: true, schema: `{"type": "object"}`},
	}}
}

func (s *shape) optionSections() {
	s.httpIdempotency = &section{fields: []field{
		{name: "header", schema: ref("headerName"), hidden: hiddenOptions,
			doc: "Request header carrying the idempotency key; default idempotency-key."},
	}}
	s.httpCorrelationHeaders = &section{fields: []field{
		{name: "reply-to", schema: ref("nonEmpty"), hidden: hiddenOptions,
			doc: "Kafka header naming the reply topic; default gateway:reply-to."},
		{name: "correlation-id", schema: ref("nonEmpty"), hidden: hiddenOptions,
			doc: "Kafka header carrying the correlation id; default gateway:correlation-id."},
	}}
	s.httpCorrelation = &section{fields: []field{{name: "headers", schema: s.httpCorrelationHeaders, hidden: hiddenOptions}}}
	s.httpOptions = &section{def: "httpOptions", fields: []field{
		{name: "idempotency", schema: s.httpIdempotency, hidden: hiddenOptions},
		{name: "correlation", schema: s.httpCorrelation, hidden: hiddenOptions},
	}}

	s.grpcIdempotency = &section{fields: []field{
		{name: "metadata", schema: ref("headerName"), hidden: hiddenOptions,
			doc: "Metadata carrying the idempotency key; default idempotency-key."},
	}}
	s.grpcReliability = &section{fields: []field{
		{name: "field", hidden: hiddenOptions, doc: "Unknown protobuf field carrying the message id; default 32767.",
			schema: `{"type": "integer", "minimum": 1, "maximum": 536870911, "not": {"minimum": 19000, "maximum": 19999}}`},
		{name: "metadata", schema: ref("headerName"), hidden: hiddenOptions,
			doc: "Metadata carrying the last message id on resume; default last-message-id."},
	}}
	s.grpcCorrelationHeaders = &section{fields: []field{
		{name: "service", schema: ref("nonEmpty"), hidden: hiddenOptions, doc: "Default gateway:service."},
		{name: "method", schema: ref("nonEmpty"), hidden: hiddenOptions, doc: "Default gateway:method."},
		{name: "correlation-id", schema: ref("nonEmpty"), hidden: hiddenOptions, doc: "Default gateway:correlation-id."},
		{name: "reply-to", schema: ref("nonEmpty"), hidden: hiddenOptions, doc: "Default gateway:reply-to."},
		{name: "status", schema: ref("nonEmpty"), hidden: hiddenOptions,
			doc: "Reply header with the gRPC status code that ends the call; default: the correlation-id header's prefix (up to its last ':', else gateway:) + status."},
		{name: "message", schema: ref("nonEmpty"), hidden: hiddenOptions,
			doc: "Reply header with the gRPC status message; default: the correlation-id header's prefix + message."},
	}}
	s.grpcCorrelation = &section{fields: []field{{name: "headers", schema: s.grpcCorrelationHeaders, hidden: hiddenOptions}}}

	s.sseCredentials = &section{keywords: `{"minProperties": 1}`, fields: []field{
		{name: "query", schema: ref("nonEmpty"), hidden: hiddenCredentials,
			doc: "Query parameter holding the bearer token of a guarded route (EventSource cannot set authorization)."},
		{name: "cookie", schema: ref("nonEmpty"), hidden: hiddenCredentials,
			doc: "Cookie holding the bearer token of a guarded route."},
	}}
	s.sseOptions = &section{def: "sseOptions", fields: []field{
		{name: "credentials", schema: s.sseCredentials, hidden: hiddenCredentials,
			doc: "Where a guarded route's token is read when the request has no authorization header."},
	}}
	s.grpcOptions = &section{def: "grpcOptions", fields: []field{
		{name: "idempotency", schema: s.grpcIdempotency, hidden: hiddenOptions},
		{name: "reliability", schema: s.grpcReliability, hidden: hiddenOptions},
		{name: "correlation", schema: s.grpcCorrelation, hidden: hiddenOptions},
	}}
}

func (s *shape) routeSections() {
	s.httpCondition = &section{def: "httpCondition", fields: []field{
		{name: "method", schema: enumOrLoadRef(httpMethods()), shown: "WHEN",
			doc: "HTTP method; omitted = any method. CONNECT cannot be routed: it has no path, and the processor answers it 404."},
		{name: "path", shown: "WHEN",
			doc: "Path without query string; {name} matches one segment piece, e.g. /items/{id};cid={correlationId}.",
			schema: `{"anyOf": [{"type": "string", "pattern": "^/[^{}?#*\\x00-\\x20\\x7f]*(?:\\{[A-Za-z_][A-Za-z0-9_]*\\}[^{}?#*\\x00-\\x20\\x7f]+)*(?:\\{[A-Za-z_][A-Za-z0-9_]*\\})?$"},
				{"$ref": "#/$defs/loadRef"}]}`},
	}}
	s.binaryMetadata = &section{fields: []field{
		{name: "base64", required: true, shown: "base64:",
			schema: `{"anyOf": [{"type": "string", "pattern": "^[A-Za-z0-9+/]*={0,2}$"}, {"$ref": "#/$defs/loadRef"}]}`},
	}}
	s.grpcCondition = &section{def: "grpcCondition", fields: []field{
		{name: "method", shown: "WHEN", doc: "pkg.Service/Method, or pkg.Service/* for any method.",
			schema: `{"anyOf": [{"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*/([A-Za-z_][A-Za-z0-9_]*|\\*)$"},
				{"$ref": "#/$defs/loadRef"}]}`},
		{name: "service", shown: "WHEN", doc: "Fully qualified service name, e.g. example.v1.Items.",
			schema: `{"anyOf": [{"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$"}, {"$ref": "#/$defs/loadRef"}]}`},
		{name: "metadata", shown: "WHEN", doc: "Metadata that must all be present and equal; -bin entries are given as {base64: ...}.",
			schema: obj{
				{"type", "object"},
				{"propertyNames", obj{{"pattern", headerPattern}}},
				{"patternProperties", obj{{"-[Bb][Ii][Nn]$", s.binaryMetadata}}},
				{"additionalProperties", obj{{"type", "string"}}},
			}},
	}}
	route := func(def, requests string, when *section, with, keywords any) *section {
		return &section{def: def, keywords: keywords, fields: []field{
			{name: "id", schema: ref("routeId"), shown: "ID"},
			{name: "guarded", schema: ref("guarded"), shown: "GUARDED"},
			{name: "when", schema: obj{{"type", "array"}, {"items", when}}, shown: "WHEN",
				doc: "Conditions, ORed; a route without when matches every " + requests + "."},
			{name: "exit", required: true, schema: ref("nonEmpty"), shown: "EXIT", doc: "The kafka binding this route uses."},
			{name: "with", required: true, schema: with, shown: "CAPABILITY"},
		}}
	}
	// What the loader checks between when and with that a schema can say:
	// a fetch answers GET and HEAD; {correlationId} is in the path of a GET
	// of a produce route with reply-to and async only.
	s.httpRoute = route("httpRoute", "request", s.httpCondition, s.httpWith, `{"allOf": [
		{"if": {"required": ["with"], "properties": {"with": {"required": ["capability"], "properties": {"capability": {"const": "fetch"}}}}},
		 "then": {"properties": {"when": {"items": {"properties": {"method": {"anyOf": [{"enum": ["GET", "HEAD"]}, {"$ref": "#/$defs/loadRef"}]}}}}}}},
		{"if": {"required": ["with"], "properties": {"with": {"required": ["capability", "reply-to", "async"], "properties": {"capability": {"const": "produce"}}}}},
		 "then": {"properties": {"when": {"items": {"if": {"required": ["path"], "properties": {"path": {"pattern": "\\{correlationId\\}"}}},
			"then": {"required": ["method"], "properties": {"method": {"const": "GET"}}}}}}},
		 "else": {"properties": {"when": {"items": {"properties": {"path": {"not": {"pattern": "\\{correlationId\\}"}}}}}}}}]}`)
	s.grpcRoute = route("grpcRoute", "call", s.grpcCondition, s.grpcWith, nil)
	// An sse-kafka route only fetches, with GET: its with has no capability.
	s.sseRoute = route("sseRoute", "request", s.httpCondition, s.sseWith, `{"allOf": [{"properties": {"when": {"items": {"properties": {"method": {"anyOf": [{"const": "GET"}, {"$ref": "#/$defs/loadRef"}]}}}}}}]}`)

	binding := func(def, typ string, options, route *section) *section {
		return &section{def: def, fields: []field{
			{name: "type", required: true, schema: `{"const": "` + typ + `"}`, shown: "(" + typ + ")"},
			{name: "kind", required: true, schema: `{"const": "proxy"}`, hidden: "always proxy"},
			{name: "options", schema: options, hidden: hiddenOptions},
			{name: "routes", schema: obj{{"type", "array"}, {"items", route}}, shown: "ROUTE"},
		}}
	}
	s.httpBinding = binding("httpBinding", "http-kafka", s.httpOptions, s.httpRoute)
	s.grpcBinding = binding("grpcBinding", "grpc-kafka", s.grpcOptions, s.grpcRoute)
	s.sseBinding = binding("sseBinding", "sse-kafka", s.sseOptions, s.sseRoute)
}

// filterSections are a fetch's filters and merge.
func (s *shape) filterSections() (httpFilters, grpcFilters *named) {
	filter := func(template string) *section {
		return &section{keywords: `{"minProperties": 1}`, fields: []field{
			{name: "key", schema: ref(template), shown: "key="},
			{name: "headers", schema: `{"type": "object", "additionalProperties": ` + ref(template) + `}`, shown: "headers{"},
		}}
	}
	filters := func(name string, f *section) *named {
		return &named{name: name, schema: obj{
			{"description", "Criteria; any one filter may match. Within a filter, the key and every header must match."},
			{"type", "array"}, {"minItems", 1}, {"items", f},
		}}
	}
	s.httpFilter, s.grpcFilter = filter("httpTopicTemplate"), filter("grpcTopicTemplate")

	s.mergePatch = &section{fields: []field{
		{name: "initial", required: true, hidden: "always [], written out only to say so",
			schema: `{"anyOf": [{"type": "array", "maxItems": 0}, {"type": "string", "pattern": "^\\s*\\[\\]\\s*$"}, {"$ref": "#/$defs/loadRef"}]}`},
		{name: "path", required: true, hidden: "always /-, written out only to say so",
			schema: `{"anyOf": [{"const": "/-"}, {"$ref": "#/$defs/loadRef"}]}`},
	}}
	s.merge = &section{doc: "Answer with all current records as one JSON array.", fields: []field{
		{name: "content-type", schema: `{"anyOf": [{"const": "application/json"}, {"$ref": "#/$defs/loadRef"}]}`, shown: "merge:"},
		{name: "patch", schema: s.mergePatch, hidden: "always initial [] and path /-, written out only to say so"},
	}}

	return filters("httpFilters", s.httpFilter), filters("grpcFilters", s.grpcFilter)
}

func (s *shape) withSections() {
	httpFilters, grpcFilters := s.filterSections()
	common := func(capability, template string) []field {
		return []field{
			{name: "capability", required: true, schema: `{"const": "` + capability + `"}`, shown: "CAPABILITY"},
			{name: "topic", required: true, schema: `{"allOf": [` + ref("topic") + `, ` + ref(template) + `]}`, shown: "TOPIC"},
			{name: "topic-pattern", schema: ref("topicPattern"), shown: "topic-pattern="},
		}
	}
	needsPattern := `{"allOf": [` + ref("templatedTopicNeedsPattern") + `]}`
	s.httpFetch = &section{def: "httpFetch", fields: append(common("fetch", "httpTopicTemplate"),
		field{name: "filters", schema: httpFilters, shown: "filters:"},
		field{name: "merge", schema: s.merge, shown: "merge:"},
	), keywords: `{"anyOf": [{"required": ["filters"]}, {"required": ["merge"]}], "allOf": [` + ref("templatedTopicNeedsPattern") + `]}`}
	s.grpcFetch = &section{def: "grpcFetch", keywords: needsPattern, fields: append(common("fetch", "grpcTopicTemplate"),
		field{name: "filters", schema: grpcFilters, shown: "filters:"},
	)}
	s.sseEvent = &section{fields: []field{
		{name: "id", shown: "event.id=", schema: `{"anyOf": [{"const": "${etag}"}, {"$ref": "#/$defs/loadRef"}]}`,
			doc: "The event id: ${etag}, the stream's position across every partition (the default, and the only value: a resume needs it)."},
	}}
	s.sseWith = &section{def: "sseWith", keywords: needsPattern, fields: append(common("fetch", "httpTopicTemplate")[1:],
		field{name: "filters", schema: httpFilters, shown: "filters:"},
		field{name: "event", schema: s.sseEvent, shown: "event.id="},
	)}
	produce := func(template, keyDoc, overridesDoc, replyToDoc string) []field {
		return []field{
			{name: "acks", schema: ref("acks"), shown: "acks="},
			{name: "key", schema: `{"allOf": [` + ref(template) + `, {"minLength": 1}]}`, shown: "KEY", doc: keyDoc},
			{name: "overrides", schema: `{"type": "object", "additionalProperties": ` + ref(template) + `}`, shown: "overrides{", doc: overridesDoc},
			{name: "reply-to", schema: ref("topicName"), shown: "REPLY-TO", doc: replyToDoc},
		}
	}
	s.httpProduce = &section{def: "httpProduce",
		keywords: `{"dependentRequired": {"async": ["reply-to"]}, "allOf": [` + ref("templatedTopicNeedsPattern") + `]}`,
		fields: append(append(common("produce", "httpTopicTemplate"), produce("httpKeyTemplate",
			"Record key; may use ${params.x}, ${idempotencyKey}, ${guarded['g'].identity}.",
			"Kafka headers added to the record.",
			"Topic the reply is read from; without it the route is oneway.")...),
			field{name: "async", shown: "async{",
				doc: "Response headers of a 202 to prefer: respond-async; location must contain ${correlationId}.",
				schema: obj{
					{"type", "object"},
					{"anyOf", parseJSON(`[{"required": ["location"]}, {"required": ["Location"]}]`)},
					{"propertyNames", obj{{"pattern", headerPattern}}},
					{"additionalProperties", ref("asyncTemplate")},
					{"properties", parseJSON(`{
						"location": {"allOf": [{"$ref": "#/$defs/asyncTemplate"}, {"pattern": "\\$\\{correlationId\\}"}]},
						"Location": {"allOf": [{"$ref": "#/$defs/asyncTemplate"}, {"pattern": "\\$\\{correlationId\\}"}]}}`)},
				}},
		)}
	s.grpcProduce = &section{def: "grpcProduce", keywords: needsPattern,
		fields: append(common("produce", "grpcTopicTemplate"), produce("grpcKeyTemplate",
			"Record key; default the correlation id.",
			"Kafka headers added to each record.",
			"Topic the replies are read from; without it the call is oneway.")...)}
	with := func(def string, fetch, produce *section) *union {
		return &union{def: def, key: "capability", required: []string{"capability"},
			variants: []variant{{string(Fetch), fetch}, {string(Produce), produce}}}
	}
	s.httpWith = with("httpWith", s.httpFetch, s.httpProduce)
	s.grpcWith = with("grpcWith", s.grpcFetch, s.grpcProduce)
}

func (s *shape) guardSections() {
	roles := field{name: "roles-claim", schema: ref("nonEmpty"), doc: "Default scope.", shown: "roles-claim="}
	identity := field{name: "identity-claim", schema: ref("nonEmpty"), doc: "Default sub.", shown: "identity-claim="}
	s.jwtOptions = &section{keywords: `{"oneOf": [{"required": ["keys"]}, {"required": ["keys-file"]}]}`, fields: []field{
		{name: "issuer", schema: ref("nonEmpty"), shown: "issuer="},
		{name: "audience", schema: ref("nonEmpty"), shown: "audience="},
		{name: "keys", shown: "keys=", doc: "JWKS keys inline, or a string holding a JWKS document (e.g. ${env:JWKS}).",
			schema: `{"anyOf": [{"type": "array", "minItems": 1, "items": {"type": "object", "required": ["kty"], "properties": {"kty": {"type": "string", "minLength": 1}}}},
				{"type": "string", "minLength": 1}]}`},
		{name: "keys-file", schema: ref("nonEmpty"), shown: "keys=", doc: "JWKS file; relative to the config file's directory."},
		{name: "algorithms", shown: "algorithms=", doc: "Accepted algorithms; default every asymmetric one.",
			schema: obj{{"type", "array"}, {"minItems", 1}, {"items", enumOrLoadRef(jwtAlgorithms())}}},
		roles, identity,
		{name: "skew", schema: `{"anyOf": [` + ref("duration") + `, {"const": 0}, {"const": "0"}]}`, shown: "skew=",
			doc: "Clock skew allowed on exp/nbf; default 30s."},
	}}
	s.envoyOptions = &section{fields: []field{
		{name: "provider", required: true, schema: ref("nonEmpty"), shown: "provider=",
			doc: "The jwt_authn provider's payload_in_metadata name."},
		roles, identity,
	}}
	guard := func(def, typ, doc string, options *section) *section {
		return &section{def: def, doc: doc, fields: []field{
			{name: "type", schema: `{"const": "` + typ + `"}`, shown: "TYPE"},
			{name: "options", schema: options, shown: "SETTINGS"},
		}}
	}
	s.jwtGuard = guard("jwtGuard", "jwt", "Verifies the bearer token itself.", s.jwtOptions)
	s.envoyJWTGuard = guard("envoyJwtGuard", "envoy-jwt", "Trusts the payload Envoy's jwt_authn filter forwarded in metadata.", s.envoyOptions)
	s.guard = &union{def: "guard", key: "type", required: []string{"type", "options"},
		variants: []variant{{"jwt", s.jwtGuard}, {"envoy-jwt", s.envoyJWTGuard}}}
}

// limitsSection is the limits object, one field per limitKeys entry.
func limitsSection() *section {
	schemas := map[limitKind]js{sizeLimit: ref("size"), durationLimit: ref("duration"), durationOrNone: ref("duration"), countLimit: ref("count")}
	sec := &section{def: "limits"}
	for _, k := range limitKeys() {
		sec.fields = append(sec.fields, field{name: k.key, schema: schemas[k.kind], doc: k.doc, shown: k.key + "="})
	}
	return sec
}

// valueSchemas are the named schemas of values, referred to from the
// sections as ref(name).
func valueSchemas() []*named {
	template := func(name, doc, refs string) *named {
		return &named{name: name, schema: obj{{"description", doc}, {"type", "string"},
			{"pattern", `^(?:[^$]|\$+(?:[^${]|\{(?:` + refs + `env:[A-Za-z_][A-Za-z0-9_]*|file:[^}]+)\}|$))*$`}}}
	}
	const params, guardID = `params\.[A-Za-z_][A-Za-z0-9_]*|`, `guarded\['[^']+'\]\.identity|`
	acks := []string{string(AcksNone), string(AcksLeaderOnly), string(AcksInSyncReplicas)}
	return []*named{
		{name: "name", schema: `{"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"}`},
		{name: "loadRef", schema: `{"description": "A whole value taken from the environment or from a file at load time.",
			"type": "string", "pattern": "^\\$\\{(env:[A-Za-z_][A-Za-z0-9_]*|file:[^}]+)\\}$"}`},
		{name: "nonEmpty", schema: `{"type": "string", "minLength": 1}`},
		{name: "headerName", schema: obj{{"anyOf", arr{obj{{"type", "string"}, {"pattern", headerPattern}}, ref("loadRef")}}}},
		{name: "topic", schema: `{"description": "Kafka topic name; a topic referencing the request needs topic-pattern.",
			"type": "string", "minLength": 1,
			"anyOf": [{"pattern": "\\$\\{(params\\.|guarded\\[)"}, {"pattern": "^[A-Za-z0-9.-][A-Za-z0-9._-]{0,248}$"}, {"pattern": "\\$\\{(env|file):"}]}`},
		{name: "topicPattern", schema: `{"description": "Glob (*, ?, [...]) every resolved name of a templated topic must match.", "type": "string", "minLength": 1}`},
		{name: "duration", schema: `{"description": "A duration with units: 250ms, 30s, 10m, 1h30m.",
			"anyOf": [{"type": "string", "pattern": "^(([0-9]+\\.?[0-9]*|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$"}, {"$ref": "#/$defs/loadRef"}]}`},
		{name: "size", schema: `{"description": "A byte size: a number of bytes, or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 512KiB, 1MiB.",
			"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)? ?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$"}, {"$ref": "#/$defs/loadRef"}]}`},
		{name: "count", schema: `{"type": "integer", "minimum": 1, "maximum": 2147483647}`},
		{name: "acks", schema: append(obj{{"description", "Kafka acknowledgement mode; default in_sync_replicas."}}, enumOrLoadRef(acks)...)},
		{name: "guarded", schema: `{"description": "Roles required by each named guard; every guard must pass.", "type": "object",
			"propertyNames": {"$ref": "#/$defs/name"}, "additionalProperties": {"type": "array", "items": {"$ref": "#/$defs/nonEmpty"}}}`},
		{name: "routeId", schema: `{"description": "Names the route in metrics and traces; unique in its binding. Default: the first condition's METHOD:/path, gRPC method or service, else capability:topic.",
			"type": "string", "minLength": 1, "maxLength": 128}`},
		template("httpTopicTemplate", "May reference ${params.<name>} and ${guarded['<guard>'].identity}.", params+guardID),
		template("httpKeyTemplate", "May reference ${params.<name>}, ${idempotencyKey} and ${guarded['<guard>'].identity}.", params+`idempotencyKey|`+guardID),
		template("asyncTemplate", "May reference ${params.<name>} and ${correlationId}.", params+`correlationId|`),
		template("grpcTopicTemplate", "May reference ${guarded['<guard>'].identity}.", guardID),
		template("grpcKeyTemplate", "May reference ${idempotencyKey} and ${guarded['<guard>'].identity}.", `idempotencyKey|`+guardID),
		{name: "topicName", schema: `{"description": "A Kafka topic name: up to 249 letters, digits, \".\", \"_\" and \"-\", not starting with \"_\".",
			"anyOf": [{"type": "string", "pattern": "^[A-Za-z0-9.-][A-Za-z0-9._-]{0,248}$"}, {"$ref": "#/$defs/loadRef"}]}`},
		{name: "templatedTopicNeedsPattern", schema: `{"if": {"required": ["topic"], "properties": {"topic": {"pattern": "\\$\\{(params\\.|guarded\\[|idempotencyKey|correlationId)"}}},
			"then": {"required": ["topic-pattern"]}}`},
	}
}

// filter is the section of one entry of a route's filters.
func (s *shape) filter(http bool) *section {
	if http {
		return s.httpFilter
	}
	return s.grpcFilter
}

// with is the union of a route's with.
func (s *shape) with(http bool) *union {
	if http {
		return s.httpWith
	}
	return s.grpcWith
}

// withNames are the fields a with of either capability may have, listed
// for a with whose capability is missing or unknown: a grpc-kafka with's,
// then the two http-kafka adds (merge, async).
func (s *shape) withNames(http bool) []string {
	secs := []*section{s.grpcFetch, s.grpcProduce}
	if http {
		secs = append(secs, s.httpFetch, s.httpProduce)
	}
	return unionNames(secs...)
}
