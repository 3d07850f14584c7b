package config

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/kafka-ext-proc/kafka-ext-proc/models"
)

// TopicModels are the models of the topics one `options.topics` entry of a
// kafka binding names: what keys and values must be, and whether they are
// converted between JSON and the registry's format.
type TopicModels struct {
	// Name is a topic name or a glob (path.Match syntax) covering templated
	// topics; the first entry matching a topic applies.
	Name       string
	Key, Value *models.Model // nil: not checked
	// KeyConfig and ValueConfig are the models as written, so a reload can
	// tell whether they changed (models live as long as the clusters).
	KeyConfig, ValueConfig string
	// ViewStore is where the topic's view is kept: "memory", "disk", or ""
	// for the binding's choice.
	ViewStore string
	Pos       Pos
}

// Models returns the models of topic on this cluster, nil when no
// `options.topics` entry names it.
func (k *KafkaCluster) Models(topic string) *TopicModels {
	if k == nil {
		return nil
	}
	for _, t := range k.Topics {
		if t.Name == topic {
			return t
		}
		if ok, _ := path.Match(t.Name, topic); ok {
			return t
		}
	}
	return nil
}

// topics reads a kafka binding's `options.topics`.
func (d *decoder) topics(n ast.Node, cfg *Config) []*TopicModels {
	_, items, ok := d.sequence(n, "topics")
	if !ok {
		return nil
	}
	var out []*TopicModels
	seen := map[string]bool{}
	for _, it := range items {
		if it == nil {
			continue
		}
		_, entries, ok := d.mapping(it, "a topics entry", "key")
		if !ok {
			continue
		}
		m := d.fields(entries, "a topics entry", d.shape.topicEntry.names()...)
		ne := m["name"]
		if ne == nil {
			d.errorf(it, "missing required field \"name\": the topic (or a glob such as items-*)")
			continue
		}
		name, good := d.nonEmpty(ne.v, "name")
		if !good {
			continue
		}
		if _, err := path.Match(name, ""); err != nil {
			d.errorf(ne.v, "name %q is not a valid glob: %v", name, err)
			continue
		}
		if seen[name] {
			d.errorf(ne.v, "topic %q is listed twice", name)
			continue
		}
		seen[name] = true
		t := &TopicModels{Name: name, Pos: d.pos(it)}
		if e := m["key"]; e != nil {
			t.Key = d.model(e.v, cfg, name, true)
			t.KeyConfig = nodeText(e.v)
		}
		if e := m["value"]; e != nil {
			t.Value = d.model(e.v, cfg, name, false)
			t.ValueConfig = nodeText(e.v)
		}
		if e := m["view-store"]; e != nil {
			t.ViewStore = d.storeType(e, "view-store")
		}
		out = append(out, t)
	}
	return out
}

func nodeText(n ast.Node) string {
	if n == nil {
		return ""
	}
	return n.String()
}

// modelNames are the values of `model`.
func modelNames() []string {
	return []string{"json", "avro", "protobuf", "string", "int32", "int64", "float", "double", "boolean", "bytes"}
}

var globRe = regexp.MustCompile(`[*?\[]`)

// model reads one key or value model and builds it: a schema from an inline
// or filesystem catalog compiles now, so a schema that does not compile is
// an error here.
func (d *decoder) model(n ast.Node, cfg *Config, topic string, key bool) *models.Model {
	node, fields, ok := d.mapping(n, "model", "key")
	if !ok {
		return nil
	}
	typ, ok := d.discriminator(node, fields, "model", "model", "a topic model", modelNames()...)
	m := d.fields(fields, "a model", d.shape.topicModel.names()...)
	if !ok {
		return nil
	}
	mc := models.Config{Model: typ}
	good := d.modelView(m, typ, &mc)
	good = d.modelFrame(m, &mc) && good
	good = d.stringModel(m, typ, &mc) && good
	ce := m["catalog"]
	if !d.modelSchema(node, ce, cfg, topic, key, &mc) || !good {
		return nil
	}
	mdl, err := models.New(context.Background(), mc)
	if err != nil {
		at := n
		if ce != nil {
			at = ce.v
		}
		var se *models.SchemaError
		if errors.As(err, &se) {
			// A compiler's message may span lines; a config error is one.
			d.errorf(at, "the schema does not compile: %s", strings.Join(strings.Fields(se.Error()), " "))
		} else {
			d.errorf(at, "%v", err)
		}
		return nil
	}
	return mdl
}

// schemaModel reports whether a model of type typ takes its schema from a catalog.
func schemaModel(typ string) bool { return typ == "json" || typ == "avro" || typ == "protobuf" }

// modelView reads `view`: only a model with a schema has one.
func (d *decoder) modelView(m map[string]*entry, typ string, mc *models.Config) bool {
	e := m["view"]
	if e == nil {
		return true
	}
	v, ok := d.str(e.v, "view")
	switch {
	case !ok:
		return false
	case v != "json":
		d.errorf(e.v, "unknown view %q; allowed: json (JSON outside, the model's format in Kafka)", v)
		return false
	case !schemaModel(typ):
		d.errorf(e.v, "model %s has no view: its values are already text", typ)
		return false
	}
	mc.View = v
	return true
}

// modelFrame reads `frame`.
func (d *decoder) modelFrame(m map[string]*entry, mc *models.Config) bool {
	e := m["frame"]
	if e == nil {
		return true
	}
	b, ok := e.v.(*ast.BoolNode)
	if !ok {
		d.wrongType(e.v, "frame", "true or false")
		return false
	}
	v := b.Value
	mc.Frame = &v
	return true
}

// stringModel reads the checks of a string model: min-length, max-length
// and pattern, which no other model has.
func (d *decoder) stringModel(m map[string]*entry, typ string, mc *models.Config) bool {
	if typ != "string" {
		good := true
		for _, k := range []string{"min-length", "max-length", "pattern"} {
			if e := m[k]; e != nil {
				d.errorf(e.kn, "%s applies to model string only", k)
				good = false
			}
		}
		return good
	}
	good := true
	if e := m["min-length"]; e != nil {
		v, ok := d.integer(e.v, "min-length")
		good = good && ok
		mc.String.MinLength = int(v)
	}
	if e := m["max-length"]; e != nil {
		v, ok := d.integer(e.v, "max-length")
		good = good && ok
		mc.String.MaxLength = int(v)
	}
	if e := m["pattern"]; e != nil {
		v, ok := d.str(e.v, "pattern")
		good = good && ok
		mc.String.Pattern = v
	}
	return good
}

// modelSchema requires a catalog of a model with a schema, and refuses one
// of any other model.
func (d *decoder) modelSchema(node ast.Node, ce *entry, cfg *Config, topic string, key bool, mc *models.Config) bool {
	schema := schemaModel(mc.Model)
	switch {
	case schema && ce == nil:
		d.errorf(node, "model %s needs a catalog: catalog: { <catalog name>: [{ subject: <subject> }] }", mc.Model)
		return false
	case !schema && ce != nil:
		d.errorf(ce.kn, "model %s takes no catalog", mc.Model)
		return false
	case schema:
		return d.modelCatalog(ce.v, cfg, topic, key, mc)
	}
	return true
}

// modelCatalog reads `catalog: { name: [{ subject | id | strategy: topic,
// version, record }] }`: one catalog, one schema.
func (d *decoder) modelCatalog(n ast.Node, cfg *Config, topic string, key bool, mc *models.Config) bool {
	_, entries, ok := d.mapping(n, "catalog", "catalog name")
	if !ok {
		return false
	}
	if len(entries) != 1 {
		d.errorf(n, "name one catalog, not %d", len(entries))
		return false
	}
	e := entries[0]
	c := cfg.Catalogs[e.key]
	if c == nil {
		d.errorf(e.kn, "unknown catalog %q: declare it under catalogs", e.key)
		return false
	}
	mc.Catalog = c.Catalog
	_, items, ok := d.sequence(e.v, e.key)
	if !ok {
		return false
	}
	if len(items) != 1 || items[0] == nil {
		d.errorf(e.v, "name one schema of catalog %q: [{ subject: <subject> }]", e.key)
		return false
	}
	it := items[0]
	m := d.object(it, e.key, "a catalog reference", d.shape.catalogRef.names()...)
	ok = d.optionString(m, "subject", &mc.Ref.Subject)
	ok = d.optionString(m, "record", &mc.Record) && ok
	ok = d.refStrategy(m["strategy"], topic, key, mc) && ok
	ok = d.refVersion(m["version"], mc) && ok
	ok = d.refID(m["id"], mc) && ok
	if ok && mc.Ref.Subject == "" && mc.Ref.ID == 0 {
		d.errorf(it, "name the schema: subject, id, or strategy: topic")
		ok = false
	}
	return ok
}

// refStrategy reads `strategy: topic`: the subject named after the topic.
func (d *decoder) refStrategy(s *entry, topic string, key bool, mc *models.Config) bool {
	if s == nil {
		return true
	}
	v, good := d.str(s.v, "strategy")
	switch {
	case !good:
		return false
	case v != "topic":
		d.errorf(s.v, "unknown strategy %q; allowed: topic (subject <topic>-key or <topic>-value)", v)
		return false
	case globRe.MatchString(topic):
		d.errorf(s.v, "strategy topic needs a topic name, not the glob %q: name the subject instead", topic)
		return false
	case mc.Ref.Subject != "":
		d.errorf(s.v, "strategy and subject exclude each other")
		return false
	}
	mc.Ref.Subject = models.TopicSubject(topic, key)
	return true
}

// refVersion reads `version`: latest (0) or a positive integer.
func (d *decoder) refVersion(v *entry, mc *models.Config) bool {
	if v == nil {
		return true
	}
	if s, isStr := v.v.(*ast.StringNode); isStr && s.Value == "latest" {
		mc.Ref.Version = 0
		return true
	}
	x, good := d.integer(v.v, "version")
	if !good || x < 1 || x > 1<<31-1 {
		if good {
			d.errorf(v.v, "version must be latest or a positive integer, got %d", x)
		}
		return false
	}
	mc.Ref.Version = int(x)
	return true
}

// refID reads `id`: a schema by its registry id, instead of a subject.
func (d *decoder) refID(v *entry, mc *models.Config) bool {
	if v == nil {
		return true
	}
	x, good := d.integer(v.v, "id")
	switch {
	case !good:
		return false
	case x < 1 || x > 1<<31-1:
		d.errorf(v.v, "id must be a positive integer, got %d", x)
		return false
	case mc.Ref.Subject != "":
		d.errorf(v.v, "id and subject exclude each other")
		return false
	}
	mc.Ref.ID = int(x)
	return true
}

// checkGRPCModels refuses a json or avro value model on a topic a
// grpc-kafka route names (its topic, or its reply-to topic): its messages
// are protobuf, which such a model would refuse, every one. A protobuf
// model is used both ways: produce checks and frames the request messages,
// fetch streams and replies check records and take the framing off. Which
// message the route's method carries is not in the configuration (the
// gateway has no .proto of the service), so that the model's record is that
// message cannot be checked here.
func (d *decoder) checkGRPCModels(cfg *Config) {
	for _, b := range cfg.Bindings {
		if b.Type != GRPCKafka {
			continue
		}
		for _, r := range b.Routes {
			if r.With == nil {
				continue
			}
			var topics []string
			if r.With.Topic.Static() {
				topics = append(topics, r.With.Topic.Raw)
			}
			if r.With.ReplyTo != "" {
				topics = append(topics, r.With.ReplyTo)
			}
			for _, topic := range topics {
				tm := cfg.Kafka[r.Exit].Models(topic)
				if tm == nil || tm.Value == nil {
					continue
				}
				if k := tm.Value.Kind(); k == "json" || k == "avro" {
					d.errs = append(d.errs, &Error{Pos: r.With.Pos, Msg: fmt.Sprintf(
						"the value model of topic %q is %s (options.topics, line %d), but grpc-kafka messages are protobuf: give the topic a protobuf model, or route it over http-kafka",
						topic, k, tm.Pos.Line)})
				}
			}
		}
	}
}
