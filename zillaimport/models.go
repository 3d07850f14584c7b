package zillaimport

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// models translates the topic models of Zilla's kafka cache bindings
// (options.topics[].key and .value) onto the kafka client they lead to, and
// the catalogs those models name.
func (im *importer) models() {
	for _, name := range im.order {
		b := im.bindings[name]
		kind := b.get("kind").str()
		if b.get("type").str() != "kafka" || (kind != "cache_client" && kind != "cache_server") {
			continue
		}
		topics := b.get("options").get("topics")
		if topics == nil {
			continue
		}
		client := im.cacheTarget(name)
		out, _ := im.kafka.get(client).(*omap)
		if out == nil {
			continue
		}
		opts, _ := out.get("options").(*omap)
		list, _ := opts.get("topics").([]any)
		seen := map[string]bool{}
		for _, it := range list {
			seen[it.(*omap).get("name").(string)] = true
		}
		added := 0
		for _, t := range topics.list() {
			if tr := t.get("transforms"); tr != nil {
				im.errorf(tr, "topic %s: transforms (a record key extracted from the fields of the message) cannot be translated: "+
					"views here hold the current record per key as Kafka compacts it, and a key taken from fields would merge records Kafka keeps apart; "+
					"write records with the key the routes filter on (with.key), or filter on the whole key", t.get("name").str())
			}
			key, value, tname := t.get("key"), t.get("value"), t.get("name").str()
			if (key == nil && value == nil) || tname == "" || seen[tname] {
				continue // cache_server repeats cache_client's block
			}
			seen[tname] = true
			tm := &omap{}
			tm.set("name", tname)
			if key != nil {
				tm.set("key", im.model(key))
			}
			if value != nil {
				tm.set("value", im.model(value))
			}
			list = append(list, tm)
			added++
		}
		if added > 0 {
			opts.set("topics", list, fmt.Sprintf("topic models of kafka %s %s (line %d): checked on produce, converted once per record in views", kind, name, topics.pos.Line))
		}
	}
}

// cacheTarget follows a cache binding's exits to its kafka client.
func (im *importer) cacheTarget(name string) string {
	for range 4 {
		b := im.bindings[name]
		if b == nil {
			return ""
		}
		if b.get("kind").str() == "client" {
			return name
		}
		name = b.get("exit").str()
	}
	return ""
}

// model translates one key or value model.
func (im *importer) model(n *node) *omap {
	out := &omap{}
	im.known(n, "model", "model", "type", "view", "catalog", "encoding", "minLength", "maxLength", "pattern", "validate")
	// Zilla's older shape names the model `type`.
	m := n.get("model").str()
	if m == "" {
		m = n.get("type").str()
	}
	if m == "" {
		im.errorf(n, "a key or value model names no model (model: json, avro, protobuf, string, …)")
	}
	out.set("model", m)
	if v := n.get("view").str(); v != "" {
		out.set("view", v)
	}
	if e := n.get("encoding"); e != nil && !strings.EqualFold(e.str(), "utf_8") {
		im.errorf(e, "string encoding %s cannot be translated: strings here are UTF-8", e.str())
	}
	if v := n.get("validate"); v != nil && v.str() != "strict" {
		im.note(v, "validate: %s dropped: values that do not match are always refused here (produce) and left out (fetch)", v.str())
	}
	for zilla, ours := range map[string]string{"minLength": "min-length", "maxLength": "max-length"} {
		if v := n.get(zilla); v != nil {
			if i, err := strconv.Atoi(v.str()); err == nil {
				out.set(ours, i)
			}
		}
	}
	if p := n.get("pattern").str(); p != "" {
		out.set("pattern", p)
	}
	if c := n.get("catalog"); c != nil {
		out.set("catalog", im.modelCatalog(c))
	}
	return out
}

// modelCatalog translates a model's catalog references: a map of catalog
// names to lists of refs, or, in Zilla's older shape, one list of refs each
// naming its catalog.
func (im *importer) modelCatalog(c *node) *omap {
	cat := &omap{}
	if c.kind == listNode {
		for _, r := range c.list() {
			name := r.get("name").str()
			if name == "" {
				im.errorf(r, "a catalog reference in a list names its catalog (name: …)")
				continue
			}
			im.known(r, "catalog reference", "name", "id", "subject", "version", "strategy", "record")
			im.catalog(name)
			refs, _ := cat.get(name).([]any)
			cat.set(name, append(refs, catalogRef(r)))
		}
		return cat
	}
	if c.kind != mapNode {
		im.errorf(c, "a model's catalog maps catalog names to references")
		return cat
	}
	for _, e := range c.mapEntries() {
		im.catalog(e.key)
		var refs []any
		for _, r := range e.val.list() {
			refs = append(refs, catalogRef(r))
		}
		cat.set(e.key, refs)
	}
	return cat
}

// catalogRef is one schema reference: id, subject and version, strategy,
// record.
func catalogRef(r *node) *omap {
	ref := &omap{}
	for _, f := range []string{"id", "subject", "version", "strategy", "record"} {
		v := r.get(f)
		if v == nil {
			continue
		}
		if i, err := strconv.Atoi(v.str()); err == nil && (f == "id" || f == "version") {
			ref.set(f, i)
		} else {
			ref.set(f, v.str())
		}
	}
	return ref
}

// catalog translates the catalog name into im.catalogs, once.
func (im *importer) catalog(name string) {
	if im.used["catalog "+name] {
		return
	}
	im.used["catalog "+name] = true
	c := im.root.get("catalogs").get(name)
	if c == nil {
		return // the loader reports the unknown catalog at the model
	}
	opts := c.get("options")
	out, o := &omap{}, &omap{}
	var comments []string
	switch typ := c.get("type").str(); typ {
	case "inline", "filesystem":
		field := map[string]string{"inline": "schema", "filesystem": "path"}[typ]
		subjects := &omap{}
		for _, s := range opts.get("subjects").mapEntries() {
			v := s.val.get(field).str()
			if typ == "filesystem" {
				v = im.inputRelative(v)
			}
			subjects.set(s.key, (&omap{}).with(field, v))
		}
		out.set("type", typ)
		o.set("subjects", subjects)
		if typ == "filesystem" && filepath.Dir(im.file) != "." {
			comments = append(comments, fmt.Sprintf("paths resolved against the directory of %s, the way Zilla reads them, and written relative to the directory the import ran in (absolute when the input was): save this file there, or copy the schema files beside it and write their paths relative to it", im.file))
		}
	case "schema-registry", "karapace", "karapace-schema-registry", "apicurio-registry":
		url := im.env(opts.get("url"), opts.get("url").str())
		if m := ourEnvRe.FindStringSubmatchIndex(url); m != nil && m[0] == 0 {
			im.urlVars[url[m[2]:m[3]]] = true
		}
		if typ == "apicurio-registry" {
			url = strings.TrimSuffix(url, "/") + "/apis/ccompat/v7"
			comments = append(comments, "an apicurio-registry catalog, read through Apicurio's Confluent-compatible API (check the URL); group-id and use-id do not apply there")
		}
		if strings.HasPrefix(typ, "karapace") {
			comments = append(comments, "a karapace catalog: Karapace speaks the Confluent Schema Registry API")
		}
		out.set("type", "schema-registry")
		o.set("url", url)
		switch ctx := opts.get("context").str(); ctx {
		case "":
		case "default":
			// Zilla's name for the registry's default context, which is
			// no context here: "default" would be a context of that name.
			comments = append(comments, "context: default dropped: it is the registry's default context, which needs no setting here")
		default:
			o.set("context", ctx)
		}
		if ma := opts.get("max-age").str(); ma != "" {
			if _, err := strconv.Atoi(ma); err == nil {
				ma += "s" // Zilla counts seconds
			}
			o.set("max-age", ma)
		}
		if opts.get("tls") != nil || opts.get("credentials") != nil {
			comments = append(comments, "tls and credentials not translated: set options.tls (ca-file, cert-file, key-file) and username/password or token")
		}
	default:
		im.errorf(c, "catalog %s: type %s cannot be translated", name, typ)
		return
	}
	out.set("options", o)
	im.catalogs.set(name, out, append([]string{fmt.Sprintf("zilla.yaml line %d: catalog %s", c.pos.Line, name)}, comments...)...)
}

// with sets key and returns m, for one-entry maps.
func (m *omap) with(key string, val any) *omap {
	m.set(key, val)
	return m
}

// inputRelative resolves a path of the input file (relative to its
// directory, as Zilla resolves it) to one the output can use: the loader
// resolves paths against the output's directory, which the importer does
// not know, so it writes the path as seen from where the import ran (the
// directory a user redirecting the output usually saves it in).
func (im *importer) inputRelative(p string) string {
	if p == "" || filepath.IsAbs(p) || strings.Contains(p, "${") {
		return p
	}
	return filepath.ToSlash(filepath.Join(filepath.Dir(im.file), p))
}
