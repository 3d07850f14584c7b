package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/kafka-ext-proc/kafka-ext-proc/models"
)

// Catalog is one entry of `catalogs`: where schemas come from.
type Catalog struct {
	Name    string
	Type    string // inline, filesystem or schema-registry
	Catalog models.Catalog
	// Registry is set for schema-registry catalogs: /readyz and the metrics
	// read its status, and it is closed with the configuration.
	Registry *models.Registry
	Pos      Pos
}

// Registries are the schema-registry catalogs, by name.
func (c *Config) Registries() []*models.Registry {
	var out []*models.Registry
	names := make([]string, 0, len(c.Catalogs))
	for n := range c.Catalogs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if r := c.Catalogs[n].Registry; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Close releases the registries' connections (on shutdown).
func (c *Config) Close() {
	for _, r := range c.Registries() {
		r.Close()
	}
}

func (d *decoder) catalogs(n ast.Node, cfg *Config) {
	_, entries, ok := d.mapping(n, "catalogs", "catalog name")
	if !ok {
		return
	}
	for _, e := range entries {
		if !nameRe.MatchString(e.key) {
			d.errorf(e.kn, "catalog name %q must start with a letter or digit and use only letters, digits, '.', '_' and '-'", e.key)
			continue
		}
		node, fields, ok := d.mapping(e.v, fmt.Sprintf("catalog %q", e.key), "key")
		if !ok {
			continue
		}
		typ, ok := d.discriminator(node, fields, "type", "catalog type", fmt.Sprintf("catalog %q", e.key), variantValues(d.shape.catalogTypes)...)
		m := d.fields(fields, "a catalog", d.shape.catalog.names()...)
		if !ok {
			continue
		}
		c := &Catalog{Name: e.key, Type: typ, Pos: d.pos(e.kn)}
		opts := m["options"]
		if opts == nil {
			d.errorf(node, "missing required field \"options\" in catalog %q", e.key)
			continue
		}
		var err error
		switch typ {
		case "inline":
			texts, ok := d.subjects(opts.v, d.shape.inlineOptions, d.shape.inlineSubject)
			if !ok {
				continue
			}
			c.Catalog, err = models.NewInline(e.key, texts)
		case "filesystem":
			paths, ok := d.subjects(opts.v, d.shape.filesystemOptions, d.shape.filesystemSubject)
			if !ok {
				continue
			}
			c.Catalog, err = models.NewFilesystem(e.key, d.dir, paths)
		case "schema-registry":
			c.Registry = d.registry(e.key, opts.v)
			if c.Registry == nil {
				continue
			}
			c.Catalog = c.Registry
		}
		if err != nil {
			d.errorf(opts.v, "%v", err)
			continue
		}
		cfg.Catalogs[e.key] = c
	}
}

// subjects reads `options: { subjects: { name: { <field>: text } } }` of an
// inline (schema) or filesystem (path) catalog: a subject has one field.
func (d *decoder) subjects(n ast.Node, options, subject *section) (map[string]string, bool) {
	field := subject.fields[0].name
	m := d.object(n, "options", "catalog options", options.names()...)
	e := m["subjects"]
	if e == nil {
		d.errorf(n, "missing required field \"subjects\": name each schema, e.g. subjects: { order: { %s: ... } }", field)
		return nil, false
	}
	_, entries, ok := d.mapping(e.v, "subjects", "subject")
	if !ok {
		return nil, false
	}
	out := make(map[string]string, len(entries))
	for _, s := range entries {
		sm := d.object(s.v, s.key, "a subject", subject.names()...)
		v := sm[field]
		if v == nil {
			d.errorf(s.kn, "subject %q: missing required field %q", s.key, field)
			ok = false
			continue
		}
		text, good := d.nonEmpty(v.v, field)
		ok = ok && good
		out[s.key] = text
	}
	return out, ok
}

// registry reads a schema-registry catalog's options.
func (d *decoder) registry(name string, n ast.Node) *models.Registry {
	m := d.object(n, "options", "schema-registry options", d.shape.registryOptions.names()...)
	var o models.RegistryOptions
	ok := true
	if e := m["url"]; e == nil {
		d.errorf(n, "missing required field \"url\": the registry's base URL, e.g. http://registry:8081")
		ok = false
	} else {
		o.URLs = d.urls(e.v)
		ok = ok && len(o.URLs) > 0
	}
	ok = d.optionString(m, "username", &o.Username) && ok
	ok = d.optionString(m, "password", &o.Password) && ok
	ok = d.optionString(m, "token", &o.Token) && ok
	ok = d.optionString(m, "context", &o.Context) && ok
	if o.Token != "" && (o.Username != "" || o.Password != "") {
		d.errorf(m["token"].v, "token (bearer) and username/password (basic) exclude each other: use one")
		ok = false
	}
	for key, dst := range map[string]*time.Duration{"max-age": &o.MaxAge, "timeout": &o.Timeout, "retry-after": &o.RetryAfter} {
		if e := m[key]; e != nil {
			v, good := d.duration(e.v, key, false)
			ok = ok && good
			*dst = v
		}
	}
	if e := m["tls"]; e != nil {
		t, good := d.registryTLS(e.v)
		ok = ok && good
		o.TLS = t
	}
	if !ok {
		return nil
	}
	r, err := models.NewRegistry(name, o)
	if err != nil {
		d.errorf(n, "%v", err)
		return nil
	}
	return r
}

// urls reads one URL or a list of them.
func (d *decoder) urls(n ast.Node) []string {
	var nodes []ast.Node
	if _, ok := n.(*ast.SequenceNode); ok {
		_, items, ok := d.sequence(n, "url")
		if !ok {
			return nil
		}
		nodes = items
	} else {
		nodes = []ast.Node{n}
	}
	var out []string
	for _, it := range nodes {
		s, ok := d.nonEmpty(it, "url")
		if !ok {
			return nil
		}
		if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
			d.errorf(it, "url %q must start with http:// or https://", s)
			return nil
		}
		out = append(out, s)
	}
	return out
}

// registryTLS reads `tls: { ca-file, cert-file, key-file }`; files are read
// now, so a missing one is a load error.
func (d *decoder) registryTLS(n ast.Node) (*tls.Config, bool) { return d.tlsFiles(n, "registry tls") }

// tlsFiles reads a `tls: { ca-file, cert-file, key-file }` object of the
// registryTLS section, named where in errors.
func (d *decoder) tlsFiles(n ast.Node, where string) (*tls.Config, bool) {
	m := d.object(n, "tls", where, d.shape.registryTLS.names()...)
	var ca, cert, key string
	ok := d.optionString(m, "ca-file", &ca)
	ok = d.optionString(m, "cert-file", &cert) && ok
	ok = d.optionString(m, "key-file", &key) && ok
	if !ok {
		return nil, false
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(d.rel(ca))
		if err != nil {
			d.errorf(m["ca-file"].v, "ca-file: %v", err)
			return nil, false
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			d.errorf(m["ca-file"].v, "ca-file %s holds no PEM certificate", ca)
			return nil, false
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		d.errorf(n, "cert-file and key-file go together (a client certificate for mTLS)")
		return nil, false
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(d.rel(cert), d.rel(key))
		if err != nil {
			d.errorf(m["cert-file"].v, "client certificate: %v", err)
			return nil, false
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, true
}

func (d *decoder) rel(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(d.dir, p)
}
