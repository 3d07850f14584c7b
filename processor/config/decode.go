package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Defaults of the fields a file may leave out.
const (
	DefaultIdempotencyKey      = "idempotency-key"
	DefaultReplyToHeader       = "gateway:reply-to"
	DefaultCorrelationIDHeader = "gateway:correlation-id"
	DefaultServiceHeader       = "gateway:service"
	DefaultMethodHeader        = "gateway:method"
	DefaultReliabilityField    = 32767
	DefaultReliabilityMetadata = "last-message-id"
	DefaultRolesClaim          = "scope"
	DefaultIdentityClaim       = "sub"
	DefaultSkew                = 30 * time.Second
)

var (
	nameRe        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	headerRe      = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
	grpcServiceRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	grpcMethodRe  = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)/([A-Za-z_][A-Za-z0-9_]*|\*)$`)
)

func (d *decoder) top(body ast.Node) *Config {
	node, entries, ok := d.mapping(body, "the file", "key")
	if !ok {
		return nil
	}
	m := d.fields(entries, "the top level", d.shape.top.names()...)
	cfg := &Config{
		Source:   d.file,
		Kafka:    map[string]*KafkaCluster{},
		Guards:   map[string]*Guard{},
		Limits:   DefaultLimits(),
		Catalogs: map[string]*Catalog{},
	}
	d.guardNames = map[string]bool{}
	d.proxyTypes = map[string]string{}
	d.kafkaNames = map[string]bool{}
	// Guards first: routes check their guard references against them.
	if e := m["guards"]; e != nil {
		d.guards(e.v, cfg)
	}
	if e := m["limits"]; e != nil {
		d.limits(e.v, &cfg.Limits)
	}
	// Catalogs before bindings: topic models name them.
	if e := m["catalogs"]; e != nil {
		d.catalogs(e.v, cfg)
	}
	if e := m["bindings"]; e != nil {
		d.bindings(e.v, cfg)
		d.checkGRPCModels(cfg)
	} else {
		d.errorf(node, "missing required field \"bindings\": declare at least one kafka binding and one http-kafka, grpc-kafka or sse-kafka binding")
	}
	return cfg
}

// discriminator reads a field that selects the shape of its object (binding
// and guard type, capability). It is taken literally: a reference there would
// leave the rest of the object unreadable.
func (d *decoder) discriminator(node ast.Node, fields []entry, key, noun, owner string, allowed ...string) (string, bool) {
	var e *entry
	for i := range fields {
		if fields[i].key == key {
			e = &fields[i]
		}
	}
	if e == nil {
		d.errorf(node, "missing required field %q in %s; allowed values: %s", key, owner, strings.Join(allowed, ", "))
		return "", false
	}
	s, ok := d.literal(e.v, key)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		d.errorf(e.v, "unknown %s %q; allowed: %s", noun, s, strings.Join(allowed, ", "))
		return "", false
	}
	return s, true
}

func (d *decoder) kafkaCluster(name string, kn, node ast.Node, m map[string]*entry, cfg *Config) *KafkaCluster {
	kc := &KafkaCluster{Name: name, Properties: map[string]string{}, Pos: d.pos(kn), PropertyPos: map[string]Pos{}}
	e := m["options"]
	if e == nil {
		d.errorf(node, "missing required field \"options\": a kafka binding needs at least options.bootstrap.servers")
		return nil
	}
	on, entries, ok := d.mapping(e.v, "options", "property")
	if !ok {
		return nil
	}
	ok = true
	for _, p := range entries {
		if p.key == "topics" {
			// Not a librdkafka property: the topics' models.
			kc.Topics = d.topics(p.v, cfg)
			continue
		}
		if p.key == "view-store" {
			// Not a librdkafka property: where the views are kept.
			kc.ViewStore = d.viewStore(p.v)
			continue
		}
		if p.v != nil {
			kc.PropertyPos[p.key] = d.pos(p.v)
		}
		switch p.v.(type) {
		case *ast.StringNode, *ast.LiteralNode:
			s, good := d.str(p.v, p.key)
			if good && s == "" && (p.key == "bootstrap.servers" || p.key == "metadata.broker.list") {
				d.errorf(p.v, "%s must not be empty: list the brokers to connect to, e.g. localhost:9092", p.key)
				good = false
			}
			ok = ok && good
			kc.Properties[p.key] = s
		case nil:
			ok = false
		default:
			s, good := scalarText(p.v)
			if !good {
				d.errorf(p.v, "kafka property %q must be a string, number or boolean, got %s", p.key, describe(p.v))
				ok = false
				continue
			}
			kc.Properties[p.key] = s
		}
	}
	// metadata.broker.list is librdkafka's other name for bootstrap.servers.
	_, bs := kc.Properties["bootstrap.servers"]
	_, mbl := kc.Properties["metadata.broker.list"]
	if ok && !bs && !mbl {
		d.errorf(on, "missing required property \"bootstrap.servers\": the brokers to connect to, e.g. localhost:9092")
		ok = false
	}
	if !ok {
		return nil
	}
	d.checkViewStore(kc, on)
	return kc
}

// viewStore reads a kafka binding's `options.view-store`.
func (d *decoder) viewStore(n ast.Node) ViewStore {
	vs := ViewStore{Pos: d.pos(n)}
	m := d.object(n, "view-store", "view-store", d.shape.viewStore.names()...)
	if e := m["type"]; e != nil {
		vs.Disk = d.storeType(e, "type") == "disk"
	}
	if e := m["directory"]; e != nil {
		if dir, ok := d.nonEmpty(e.v, "directory"); ok {
			vs.Directory = d.rel(dir)
		}
	}
	return vs
}

// storeType reads a view store type: memory or disk ("" when wrong).
func (d *decoder) storeType(e *entry, field string) string {
	s, ok := d.literal(e.v, field)
	if !ok {
		return ""
	}
	if s != "memory" && s != "disk" {
		d.errorf(e.v, "unknown view store %q in %s; allowed: memory, disk", s, field)
		return ""
	}
	return s
}

// checkViewStore requires a directory once a view of the binding is on disk.
func (d *decoder) checkViewStore(kc *KafkaCluster, options ast.Node) {
	if kc.ViewStore.Directory != "" || !kc.AnyViewOnDisk() {
		return
	}
	if kc.ViewStore.Pos.Line > 0 {
		d.errs = append(d.errs, &Error{Pos: kc.ViewStore.Pos,
			Msg: "missing required field \"directory\" in view-store: views on disk need a directory to keep them in, e.g. /var/lib/kafka-ext-proc/views"})
		return
	}
	d.errorf(options, "a topic's view-store is disk, but the binding has no view-store.directory to keep it in: add view-store: {directory: /var/lib/kafka-ext-proc/views}")
}

// checkRecordBytes refuses a message.max.bytes below what a request within
// the limits writes: librdkafka would refuse such a record itself.
func (d *decoder) checkRecordBytes(kc *KafkaCluster, l Limits) {
	v, ok := kc.Properties["message.max.bytes"]
	if !ok {
		return
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n >= l.RecordBytes() {
		return // librdkafka's own check reports a value that is not a number
	}
	d.errs = append(d.errs, &Error{Pos: kc.PropertyPos["message.max.bytes"], Msg: fmt.Sprintf(
		"kafka property \"message.max.bytes\" is %d bytes, below limits.max-body (%d bytes) plus %d bytes for the key and headers: "+
			"the producer would refuse records of requests the limits let through; remove it (it is then set to %d) or lower limits.max-body",
		n, l.MaxBody, RecordHeaderRoom, l.RecordBytes())})
}

// object is mapping + fields for nested objects with a fixed set of keys.
func (d *decoder) object(n ast.Node, field, where string, allowed ...string) map[string]*entry {
	_, entries, ok := d.mapping(n, field, "key")
	if !ok {
		return map[string]*entry{}
	}
	return d.fields(entries, where, allowed...)
}

// headerName reads an HTTP header or gRPC metadata name, lower-cased as
// HTTP/2 and Envoy carry them.
func (d *decoder) headerName(n ast.Node, field string, dst *string) bool {
	s, ok := d.str(n, field)
	if !ok {
		return false
	}
	if !headerRe.MatchString(s) {
		d.errorf(n, "%s %q is not a valid header name: use letters, digits and '-'", field, s)
		return false
	}
	*dst = strings.ToLower(s)
	return true
}

// article prefixes a binding type with "a" or "an" as it is read aloud.
func article(typ string) string {
	if strings.HasPrefix(typ, "http") || strings.HasPrefix(typ, "sse") {
		return "an " + typ
	}
	return "a " + typ
}
