package config

import (
	"encoding/base64"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// httpMethods are the methods a condition may name; CONNECT (no path) is refused apart.
func httpMethods() []string {
	return []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"}
}

func (d *decoder) httpCondition(n ast.Node, rc *routeCtx) {
	node, entries, ok := d.mapping(n, "a when entry", "key")
	if !ok {
		return
	}
	m := d.fields(entries, "an http-kafka condition", d.shape.httpCondition.names()...)
	c := Condition{Pos: d.pos(node)}
	var pathNode, methNode ast.Node
	if e := m["method"]; e != nil {
		if s, ok := d.str(e.v, "method"); ok {
			switch {
			case s == "CONNECT":
				d.errorf(e.v, "method CONNECT cannot be routed: a CONNECT request has no path, and the processor answers it 404")
			case slices.Contains(httpMethods(), s):
				c.Method = s
				methNode = e.v
			case slices.Contains(httpMethods(), strings.ToUpper(s)):
				d.errorf(e.v, "method %q must be upper case: %s", s, strings.ToUpper(s))
			default:
				d.errorf(e.v, "unknown method %q; allowed: %s", s, strings.Join(httpMethods(), ", "))
			}
		}
	}
	if e := m["path"]; e != nil {
		if s, ok := d.str(e.v, "path"); ok {
			pt, err := ParsePathTemplate(s)
			if err != nil {
				d.errorf(e.v, "%v", err)
			} else {
				c.Path = pt
				pathNode = e.v
			}
		}
	}
	rc.r.When = append(rc.r.When, c)
	rc.pathNodes = append(rc.pathNodes, pathNode)
	rc.pathGiven = append(rc.pathGiven, m["path"] != nil)
	rc.methNodes = append(rc.methNodes, methNode)
}

func (d *decoder) grpcCondition(n ast.Node, rc *routeCtx) {
	node, entries, ok := d.mapping(n, "a when entry", "key")
	if !ok {
		return
	}
	m := d.fields(entries, "a grpc-kafka condition", d.shape.grpcCondition.names()...)
	c := Condition{Pos: d.pos(node)}
	if e := m["method"]; e != nil {
		if s, ok := d.str(e.v, "method"); ok {
			if grpcMethodRe.MatchString(s) {
				c.GRPCMethod = s
			} else {
				d.errorf(e.v, "gRPC method %q must be shaped <package>.<Service>/<Method> or <package>.<Service>/* (no leading \"/\")", s)
			}
		}
	}
	if e := m["service"]; e != nil {
		if s, ok := d.str(e.v, "service"); ok {
			switch {
			case !grpcServiceRe.MatchString(s):
				d.errorf(e.v, "gRPC service %q must be a fully qualified service name such as example.v1.Items", s)
			case c.GRPCMethod != "" && !strings.HasPrefix(c.GRPCMethod, s+"/"):
				d.errorf(e.v, "service %q contradicts method %q: the condition could never match; keep one of them", s, c.GRPCMethod)
			default:
				c.Service = s
			}
		}
	}
	if e := m["metadata"]; e != nil {
		_, entries, ok := d.mapping(e.v, "metadata", "metadata name")
		if ok {
			seen := map[string]ast.Node{}
			for _, me := range entries {
				// Metadata names ignore case, as HTTP/2 header names do.
				if prev, dup := seen[strings.ToLower(me.key)]; dup {
					p := d.pos(prev)
					d.errorf(me.kn, "duplicate metadata name %q (names ignore case): first defined at line %d, column %d", me.key, p.Line, p.Col)
					continue
				}
				seen[strings.ToLower(me.key)] = me.kn
				if mm, ok := d.metadata(me); ok {
					c.Metadata = append(c.Metadata, mm)
				}
			}
		}
	}
	rc.r.When = append(rc.r.When, c)
	rc.pathNodes = append(rc.pathNodes, nil)
	rc.pathGiven = append(rc.pathGiven, false)
	rc.methNodes = append(rc.methNodes, nil)
}

// metadata reads one `metadata` entry. Binary (-bin) metadata is compared by
// its decoded bytes, so it must be given as {base64: ...}; {base64: ...} on a
// name without -bin, as Zilla writes it, names the <name>-bin metadata.
func (d *decoder) metadata(e entry) (MetadataMatch, bool) {
	name := strings.ToLower(e.key)
	if !headerRe.MatchString(name) {
		d.errorf(e.kn, "metadata name %q is not a valid header name: use letters, digits and '-'", e.key)
		return MetadataMatch{}, false
	}
	binary := strings.HasSuffix(name, "-bin")
	switch e.v.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		m := d.object(e.v, "metadata "+e.key, "a binary metadata value", d.shape.binaryMetadata.names()...)
		b := m["base64"]
		if b == nil {
			d.errorf(e.v, "missing required field \"base64\" in the value of metadata %q", e.key)
			return MetadataMatch{}, false
		}
		s, ok := d.str(b.v, "base64")
		if !ok {
			return MetadataMatch{}, false
		}
		if !binary {
			// Zilla's gRPC server strips -bin from binary metadata names, so
			// its conditions name binary metadata without it: this one
			// matches the metadata a client sends as <name>-bin.
			name += "-bin"
		}
		v, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			v, err = base64.RawStdEncoding.DecodeString(s)
		}
		if err != nil {
			d.errorf(b.v, "metadata %q: %q is not valid base64 (standard alphabet, padding optional)", e.key, s)
			return MetadataMatch{}, false
		}
		return MetadataMatch{Name: name, Value: v, Binary: true}, true
	case nil:
		return MetadataMatch{}, false
	}
	s, ok := d.str(e.v, "metadata "+e.key)
	if !ok {
		return MetadataMatch{}, false
	}
	if binary {
		d.errorf(e.v, "metadata %q is binary: give its value as {base64: ...}", e.key)
		return MetadataMatch{}, false
	}
	return MetadataMatch{Name: name, Value: []byte(s)}, true
}
