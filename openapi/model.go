package openapi

import (
	"encoding/json"
	"fmt"

	"github.com/goccy/go-yaml"
)

// The types below are the part of the OpenAPI 3.1 object model the generator
// writes. Fields follow the specification's names; empty ones are left out so
// that only what a configuration defines appears in the document.

// Document is an OpenAPI 3.1 document.
type Document struct {
	OpenAPI    string               `json:"openapi"`
	Info       Info                 `json:"info"`
	Servers    []Server             `json:"servers,omitempty"`
	Tags       []Tag                `json:"tags,omitempty"`
	Paths      map[string]*PathItem `json:"paths"`
	Components *Components          `json:"components,omitempty"`
}

// Info is the document's info object.
type Info struct {
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version"`
}

// Server is one entry of servers.
type Server struct {
	URL string `json:"url"`
}

// Tag groups operations; the generator uses one per binding.
type Tag struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// PathItem holds the operations of one path template.
type PathItem struct {
	Parameters []*Parameter `json:"parameters,omitempty"`
	Get        *Operation   `json:"get,omitempty"`
	Put        *Operation   `json:"put,omitempty"`
	Post       *Operation   `json:"post,omitempty"`
	Delete     *Operation   `json:"delete,omitempty"`
	Options    *Operation   `json:"options,omitempty"`
	Head       *Operation   `json:"head,omitempty"`
	Patch      *Operation   `json:"patch,omitempty"`
	Trace      *Operation   `json:"trace,omitempty"`
}

// Operation returns the operation for an upper-case HTTP method, nil if none.
func (p *PathItem) Operation(method string) *Operation {
	if slot := p.slot(method); slot != nil {
		return *slot
	}
	return nil
}

// slot is where the operation of an upper-case HTTP method lives; nil for a
// method OpenAPI has no field for (CONNECT, which the configuration refuses).
func (p *PathItem) slot(method string) **Operation {
	switch method {
	case "GET":
		return &p.Get
	case "PUT":
		return &p.Put
	case "POST":
		return &p.Post
	case "DELETE":
		return &p.Delete
	case "OPTIONS":
		return &p.Options
	case "HEAD":
		return &p.Head
	case "PATCH":
		return &p.Patch
	case "TRACE":
		return &p.Trace
	}
	return nil
}

// Operation is one method on one path.
type Operation struct {
	Tags        []string             `json:"tags,omitempty"`
	Summary     string               `json:"summary,omitempty"`
	Description string               `json:"description,omitempty"`
	OperationID string               `json:"operationId"`
	Parameters  []*Parameter         `json:"parameters,omitempty"`
	RequestBody *RequestBody         `json:"requestBody,omitempty"`
	Responses   map[string]*Response `json:"responses"`
	// Security lists alternatives; each maps guard names to required roles.
	Security []map[string][]string `json:"security,omitempty"`
	// Route says which route of the configuration answers the operation.
	Route *RouteExtension `json:"x-kafka-ext-proc,omitempty"`
}

// RouteExtension is the x-kafka-ext-proc extension of an operation: where in
// the configuration it comes from and what it does with Kafka, for readers
// and tools that want to go back from the API to the topics.
type RouteExtension struct {
	Binding    string `json:"binding"`
	Route      int    `json:"route"`
	Capability string `json:"capability"`
	Topic      string `json:"topic"`
	ReplyTo    string `json:"reply-to,omitempty"`
	Acks       string `json:"acks,omitempty"`
	FollowUp   bool   `json:"follow-up,omitempty"`
}

// Parameter is a path or header parameter, or a reference to one.
type Parameter struct {
	Ref         string  `json:"$ref,omitempty"`
	Name        string  `json:"name,omitempty"`
	In          string  `json:"in,omitempty"`
	Description string  `json:"description,omitempty"`
	Required    bool    `json:"required,omitempty"`
	Schema      *Schema `json:"schema,omitempty"`
	Example     any     `json:"example,omitempty"`
}

// RequestBody describes a request's content.
type RequestBody struct {
	Description string                `json:"description,omitempty"`
	Required    bool                  `json:"required,omitempty"`
	Content     map[string]*MediaType `json:"content"`
}

// Response is one response of an operation, or a reference to one.
type Response struct {
	Ref         string                `json:"$ref,omitempty"`
	Description string                `json:"description,omitempty"`
	Headers     map[string]*Header    `json:"headers,omitempty"`
	Content     map[string]*MediaType `json:"content,omitempty"`
}

// Header is a response header, or a reference to one.
type Header struct {
	Ref         string  `json:"$ref,omitempty"`
	Description string  `json:"description,omitempty"`
	Required    bool    `json:"required,omitempty"`
	Schema      *Schema `json:"schema,omitempty"`
}

// MediaType is the schema of one content type.
type MediaType struct {
	Schema *Schema `json:"schema"`
}

// Schema is the JSON Schema (draft 2020-12) subset the document uses. The
// zero Schema is `{}`: any value.
type Schema struct {
	Ref         string             `json:"$ref,omitempty"`
	Type        string             `json:"type,omitempty"`
	Format      string             `json:"format,omitempty"`
	Description string             `json:"description,omitempty"`
	Pattern     string             `json:"pattern,omitempty"`
	MinLength   int                `json:"minLength,omitempty"`
	MaxLength   int                `json:"maxLength,omitempty"`
	Minimum     *int               `json:"minimum,omitempty"`
	Maximum     *int               `json:"maximum,omitempty"`
	Items       *Schema            `json:"items,omitempty"`
	Properties  map[string]*Schema `json:"properties,omitempty"`
	Required    []string           `json:"required,omitempty"`
	Examples    []any              `json:"examples,omitempty"`
	// Raw, when set, is the whole schema: a topic model's JSON Schema.
	Raw json.RawMessage `json:"-"`
}

// MarshalJSON writes Raw as it is when set.
func (s *Schema) MarshalJSON() ([]byte, error) {
	if len(s.Raw) > 0 {
		return s.Raw, nil
	}
	type plain Schema // without this method
	return json.Marshal((*plain)(s))
}

// Components holds the reusable parts the operations refer to.
type Components struct {
	Schemas         map[string]*Schema         `json:"schemas,omitempty"`
	Responses       map[string]*Response       `json:"responses,omitempty"`
	Parameters      map[string]*Parameter      `json:"parameters,omitempty"`
	Headers         map[string]*Header         `json:"headers,omitempty"`
	SecuritySchemes map[string]*SecurityScheme `json:"securitySchemes,omitempty"`
}

// SecurityScheme describes how a guard authenticates callers.
type SecurityScheme struct {
	Type         string `json:"type"`
	Description  string `json:"description,omitempty"`
	Scheme       string `json:"scheme,omitempty"`
	BearerFormat string `json:"bearerFormat,omitempty"`
}

// JSON renders the document as indented JSON. Map keys (paths, responses,
// components) come out sorted, so equal configurations give equal documents.
func (d *Document) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("rendering the OpenAPI document as JSON: %w", err)
	}
	return append(b, '\n'), nil
}

// YAML renders the document as YAML, in the same order as JSON.
func (d *Document) YAML() ([]byte, error) {
	js, err := d.JSON()
	if err != nil {
		return nil, err
	}
	// Going through JSON keeps one set of field names and omitempty rules.
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return nil, fmt.Errorf("rendering the OpenAPI document as YAML: %w", err)
	}
	return y, nil
}
