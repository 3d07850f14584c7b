// Package config holds the configuration model of kafka-ext-proc and loads it
// from YAML: strict decoding, defaults, templates and semantic validation, with
// every mistake reported as file:line:column.
//
// The model is immutable once loaded; the processor builds its routing snapshot
// from it and swaps snapshots atomically on reload.
package config

import (
	"fmt"
	"strings"
	"time"
)

// Pos is a position in a configuration file.
type Pos struct {
	File string
	Line int // 1-based
	Col  int // 1-based
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// Error is one configuration mistake at a position.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// Errors is every mistake found in one load, in file order.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Config is a loaded, validated configuration file.
type Config struct {
	Source string // the file it was read from
	// Files are the other files the configuration read (${file:} secrets,
	// keys-file), as absolute paths: a change to one changes the
	// configuration, so a watcher reloads on it as on the file itself.
	Files    []string
	Kafka    map[string]*KafkaCluster // `kafka` client bindings by name
	Bindings []*Binding               // http-kafka, grpc-kafka and sse-kafka bindings, in file order
	// KafkaGRPC are the kafka-grpc bindings (kind remote_server), in file order.
	KafkaGRPC []*KafkaGRPCBinding
	Guards    map[string]*Guard
	Limits    Limits
	Catalogs  map[string]*Catalog // `catalogs` by name
}

// KafkaCluster is a binding of type kafka, kind client: a cluster routes name in `exit`.
type KafkaCluster struct {
	Name string
	// Properties pass through to librdkafka (bootstrap.servers, security.protocol, sasl.*, ssl.*).
	Properties map[string]string
	Pos        Pos
	// PropertyPos is where each property's value is written, for errors
	// found later (librdkafka's own checks in validate).
	PropertyPos map[string]Pos
	// Topics are the topic models of `options.topics` (taken out of the
	// properties), in file order.
	Topics []*TopicModels
	// ViewStore is `options.view-store` (taken out of the properties).
	ViewStore ViewStore
}

// ViewStore says where a cluster's views are kept.
type ViewStore struct {
	// Disk keeps every view on disk unless its topic says memory.
	Disk bool
	// Directory holds the views on disk, one directory per binding and
	// topic beneath; "" when no view is on disk.
	Directory string
	Pos       Pos
}

// ViewOnDisk tells whether topic's view is kept on disk: its
// `options.topics` entry's view-store, else the binding's.
func (k *KafkaCluster) ViewOnDisk(topic string) bool {
	if t := k.Models(topic); t != nil && t.ViewStore != "" {
		return t.ViewStore == "disk"
	}
	return k.ViewStore.Disk
}

// AnyViewOnDisk tells whether any of the cluster's views may be on disk.
func (k *KafkaCluster) AnyViewOnDisk() bool {
	if k.ViewStore.Disk {
		return true
	}
	for _, t := range k.Topics {
		if t.ViewStore == "disk" {
			return true
		}
	}
	return false
}

// BindingType names the proxy bindings.
type BindingType string

const (
	HTTPKafka BindingType = "http-kafka"
	GRPCKafka BindingType = "grpc-kafka"
	// SSEKafka streams a topic to browsers as Server-Sent Events: its
	// routes match HTTP paths as http-kafka's do, and fetch only.
	SSEKafka BindingType = "sse-kafka"
)

// MatchesPaths reports whether the binding's routes match HTTP requests by
// path (http-kafka and sse-kafka), not gRPC calls.
func (t BindingType) MatchesPaths() bool { return t == HTTPKafka || t == SSEKafka }

// Binding is an http-kafka, grpc-kafka or sse-kafka binding of kind proxy.
type Binding struct {
	Name   string
	Type   BindingType
	HTTP   *HTTPOptions // set, with defaults, when Type is HTTPKafka
	GRPC   *GRPCOptions // set, with defaults, when Type is GRPCKafka
	SSE    *SSEOptions  // set when Type is SSEKafka
	Routes []*Route
	Pos    Pos
}

// CorrelationHeaders are the Kafka header names the bindings write on request
// records and read on replies, so a responder can route its answer back.
type CorrelationHeaders struct {
	ReplyTo       string // default gateway:reply-to
	CorrelationID string // default gateway:correlation-id
	Service       string // grpc-kafka only; default gateway:service
	Method        string // grpc-kafka only; default gateway:method
	// Status and Message name the headers of the null-value reply record
	// that ends a gRPC call (grpc-kafka only). Default: the prefix of
	// CorrelationID (up to its last ':') + status / message, so
	// zilla:correlation-id gives zilla:status and zilla:message; without a
	// ':', gateway:status and gateway:message.
	Status  string
	Message string
}

// HTTPOptions are http-kafka options with defaults applied.
type HTTPOptions struct {
	IdempotencyHeader string // default idempotency-key (lower case)
	Correlation       CorrelationHeaders
}

// GRPCOptions are grpc-kafka options with defaults applied.
type GRPCOptions struct {
	IdempotencyMetadata string // default idempotency-key (lower case)
	ReliabilityField    int    // default 32767
	ReliabilityMetadata string // default last-message-id (lower case)
	Correlation         CorrelationHeaders
}

// SSEOptions are sse-kafka options. A browser's EventSource cannot set an
// authorization header, so a guarded route may take its bearer token from a
// query parameter or a cookie instead; empty: from neither.
type SSEOptions struct {
	CredentialsQuery  string // query parameter holding the token
	CredentialsCookie string // cookie holding the token
}

// Route is one entry of a binding's routes.
type Route struct {
	Index int // position in the binding's routes
	// ID names the route in metrics and traces: the route's `id`, or one
	// derived from what it matches (see DefaultRouteID), so reordering the
	// file keeps every label. Unique within its binding.
	ID      string
	IDPos   Pos                // where `id` is written; zero when defaulted
	Guarded []GuardRequirement // sorted by guard name; all must pass
	When    []Condition        // ORed; empty matches everything
	Exit    string             // a KafkaCluster name
	With    *With
	Pos     Pos
}

// GuardRequirement is one entry of `guarded`: the guard and the roles it must grant.
type GuardRequirement struct {
	Guard string
	Roles []string
}

// Condition is one `when` entry. HTTP conditions use Method and Path; gRPC
// conditions use GRPCMethod or Service, and Metadata.
type Condition struct {
	Method string        // HTTP method, upper case; empty = any
	Path   *PathTemplate // nil = any path

	GRPCMethod string // "pkg.Service/Method" or "pkg.Service/*"
	Service    string // "pkg.Service"
	Metadata   []MetadataMatch

	Pos Pos
}

// MetadataMatch is one `metadata` entry of a gRPC condition.
type MetadataMatch struct {
	Name   string // lower case
	Value  []byte // for Binary, the decoded bytes
	Binary bool   // given as {base64: ...}
}

// PathTemplate is a parsed `when[].path`: literal parts and `{name}` parameters.
// A parameter matches one non-empty segment without '/', ';' or '?'.
type PathTemplate struct {
	Raw    string
	Parts  []PathPart
	Params []string // parameter names in order of appearance
}

// PathPart is a literal run of a path template or a parameter.
type PathPart struct {
	Literal string
	Param   string // non-empty for a parameter
}

// Capability selects the variant of `with`.
type Capability string

const (
	Fetch   Capability = "fetch"
	Produce Capability = "produce"
)

// Acks is the Kafka acknowledgement mode of a produce route.
type Acks string

const (
	AcksNone           Acks = "none"
	AcksLeaderOnly     Acks = "leader_only"
	AcksInSyncReplicas Acks = "in_sync_replicas"
)

// With holds a route's Kafka parameters.
type With struct {
	Capability   Capability
	Topic        Template
	TopicPattern string // glob; required when Topic is not static

	// fetch
	Filters []Filter
	Merge   *Merge

	// produce
	Acks      Acks // default in_sync_replicas
	Key       *Template
	Overrides []HeaderTemplate // in file order
	ReplyTo   string
	Async     []HeaderTemplate // in file order; includes location when set

	// sse-kafka: the event id's template. Only EventIDPosition is
	// supported: the id a resume needs.
	EventID string

	Pos Pos
}

// EventIDPosition is the sse-kafka event id that is the stream's position
// across every partition (the default; the reference implementation calls
// it ${etag}).
const EventIDPosition = "${etag}"

// Filter is one `filters` entry; all its parts must match.
type Filter struct {
	Key     *Template
	Headers []HeaderTemplate
}

// HeaderTemplate is a name with a templated value.
type HeaderTemplate struct {
	Name  string
	Value Template
}

// Merge is `merge` of a fetch route: every record appended to an empty JSON
// array. Its fields are fixed, written out only so a file can say so; other
// values are refused rather than given a meaning the fetch does not have.
type Merge struct {
	ContentType  string // application/json
	PatchInitial string // []
	PatchPath    string // /-
}

// RefKind is what a `${...}` reference names.
type RefKind int

const (
	RefNone           RefKind = iota // a literal part
	RefParam                         // ${params.name}
	RefIdempotencyKey                // ${idempotencyKey}
	RefCorrelationID                 // ${correlationId}
	RefGuardIdentity                 // ${guarded['g'].identity}
)

// TemplatePart is a literal run or one reference of a Template.
type TemplatePart struct {
	Literal string
	Ref     RefKind
	Name    string // parameter name for RefParam, guard name for RefGuardIdentity
}

// Template is a string value with `${...}` references, parsed at load time.
// `${env:NAME}` is resolved while loading and never appears here.
type Template struct {
	Raw   string
	Parts []TemplatePart
}

// Static reports whether the template has no references.
func (t Template) Static() bool {
	for _, p := range t.Parts {
		if p.Ref != RefNone {
			return false
		}
	}
	return true
}

// Expand renders the template, asking resolve for each reference.
func (t Template) Expand(resolve func(TemplatePart) string) string {
	if len(t.Parts) == 1 {
		// A lone literal or reference needs no copy: "${params.id}" is the
		// parameter's own string.
		if t.Parts[0].Ref == RefNone {
			return t.Parts[0].Literal
		}
		return resolve(t.Parts[0])
	}
	var b strings.Builder
	for _, p := range t.Parts {
		if p.Ref == RefNone {
			b.WriteString(p.Literal)
		} else {
			b.WriteString(resolve(p))
		}
	}
	return b.String()
}

// Guard is one entry of `guards`.
type Guard struct {
	Name string
	Type string // jwt or envoy-jwt
	JWT  *JWTOptions
	Pos  Pos
}

// JWTOptions configure a jwt or envoy-jwt guard.
type JWTOptions struct {
	Issuer        string
	Audience      string
	Keys          []byte // a JWKS document (JSON), inline, from keys-file, or ${env:...}
	Algorithms    []string
	RolesClaim    string        // default scope
	IdentityClaim string        // default sub
	Skew          time.Duration // default 30s
	Provider      string        // envoy-jwt: the jwt_authn provider's payload_in_metadata name
}

// DefaultRouteID is the id of a route without `id`, taken from what it
// matches rather than where it stands, so reordering the file keeps it:
// its first condition's `METHOD:/path` (`*` for any method or path), gRPC
// method or service; a route without conditions is `capability:topic`.
// Routes of one binding whose default ids are equal each add their
// capability:topic (see checkRouteIDs).
func DefaultRouteID(r *Route) string {
	if len(r.When) > 0 {
		c := r.When[0]
		switch {
		case c.GRPCMethod != "":
			return c.GRPCMethod
		case c.Service != "":
			return c.Service
		case c.Method != "" || c.Path != nil:
			method, path := c.Method, "*"
			if method == "" {
				method = "*"
			}
			if c.Path != nil {
				path = c.Path.Raw
			}
			return method + ":" + path
		}
	}
	if r.With != nil {
		return string(r.With.Capability) + ":" + r.With.Topic.Raw
	}
	return "*"
}
