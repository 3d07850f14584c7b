package openapi

import (
	"encoding/json"
	"fmt"

	"github.com/kafka-ext-proc/kafka-ext-proc/models"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// models documents a static topic's value model on its operation: a JSON
// Schema from an inline or filesystem catalog becomes the request body's
// schema (produce) or the answer's (fetch of one record), and the answers
// a model adds (415, 422, 503) are listed. Schemas from a registry are
// named, not copied: the document is generated without one.
func (g *generator) models(op *Operation, r *config.Route, method string) {
	w := r.With
	if !w.Topic.Static() || method == "HEAD" {
		return
	}
	tm := g.cfg.Kafka[r.Exit].Models(w.Topic.Raw)
	if tm == nil || tm.Value == nil {
		return
	}
	m := tm.Value
	media := "*/*"
	if m.JSON() {
		media = "application/json"
	}
	schema := modelSchema(m)
	switch w.Capability {
	case config.Produce:
		if op.RequestBody == nil || w.ReplyTo != "" && method == "GET" {
			return
		}
		g.modelAnswers(op, m.JSON())
		op.RequestBody.Content = map[string]*MediaType{media: {Schema: schema}}
	case config.Fetch:
		if ok := op.Responses["200"]; ok != nil && w.Merge == nil {
			ok.Content = map[string]*MediaType{media: {Schema: schema}}
		} else if ok != nil && m.Kind() == "json" && schema.Raw != nil {
			ok.Content = map[string]*MediaType{"application/json": {Schema: &Schema{Type: "array", Items: schema}}}
		}
	}
}

// modelSchema is the schema of a body checked against m: the model's own
// JSON Schema when it has one, else a description of the check.
func modelSchema(m *models.Model) *Schema {
	schema := &Schema{Description: fmt.Sprintf("Checked against the topic's %s model.", m.Kind())}
	if m.Kind() == "json" {
		if s, ok := m.StaticSchema(); ok && json.Valid([]byte(s.Text)) {
			schema = &Schema{Raw: json.RawMessage(s.Text)}
		}
	} else if m.JSON() {
		schema.Description = fmt.Sprintf("JSON, converted to and from the topic's %s schema.", m.Kind())
	}
	return schema
}

// modelAnswers adds what a model changes in a produce operation's answers
// and request body: the body must match it, 422 when it does not, 415 for
// a JSON model sent something else, and 503 when the model's schema cannot
// be had.
func (g *generator) modelAnswers(op *Operation, jsonModel bool) {
	op.RequestBody.Description += " It must match the topic's value model."
	op.Responses["422"] = problem("The body (or key) does not match the topic's model: every violation in `errors`, each a JSON pointer (`pointer`), a reason (`detail`) and, for JSON Schema, the rule (`keyword`). Nothing was written.")
	op.Responses["400"].Description += " Or a body (or key) that does not parse as its model's format."
	if jsonModel {
		op.Responses["415"] = problem("The content-type is not JSON (`application/json` or `+json`): `accept` names what is.")
	}
	op.Responses["503"] = g.comp.response("ServiceUnavailable")
}
