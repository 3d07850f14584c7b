package config

import (
	"fmt"
	"strings"
)

// ParsePathTemplate parses a `when[].path`: literal runs and `{name}`
// parameters. A parameter may follow a literal inside a segment
// (`/items/{id};cid={correlationId}`), but two parameters need a literal
// between them, since each matches a run of characters other than '/', ';'
// and '?' and adjacent ones could not be told apart. Paths are matched
// without their query string, so '?' and '#' are refused, as is '*' (Zilla's
// wildcard, which we do not support: use a parameter).
func ParsePathTemplate(raw string) (*PathTemplate, error) {
	if !strings.HasPrefix(raw, "/") {
		return nil, fmt.Errorf("path %q must start with \"/\"", raw)
	}
	t := &PathTemplate{Raw: raw}
	seen := map[string]bool{}
	lit := strings.Builder{}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case '{':
			end := strings.IndexAny(raw[i+1:], "{}")
			if end < 0 || raw[i+1+end] == '{' {
				return nil, fmt.Errorf("unbalanced \"{\" in path %q: write parameters as {name}", raw)
			}
			name := raw[i+1 : i+1+end]
			if name == "" {
				return nil, fmt.Errorf("empty parameter {} in path %q: name it, e.g. {id}", raw)
			}
			if !identRe.MatchString(name) {
				return nil, fmt.Errorf("bad parameter name {%s} in path %q: a name is letters, digits and '_', not starting with a digit", name, raw)
			}
			if seen[name] {
				return nil, fmt.Errorf("duplicate parameter {%s} in path %q: each name may appear once", name, raw)
			}
			if lit.Len() == 0 && len(t.Parts) > 0 {
				return nil, fmt.Errorf("parameters {%s} and {%s} in path %q need a literal between them", t.Params[len(t.Params)-1], name, raw)
			}
			seen[name] = true
			if lit.Len() > 0 {
				t.Parts = append(t.Parts, PathPart{Literal: lit.String()})
				lit.Reset()
			}
			t.Parts = append(t.Parts, PathPart{Param: name})
			t.Params = append(t.Params, name)
			i += end + 1
		case '}':
			return nil, fmt.Errorf("unbalanced \"}\" in path %q: write parameters as {name}", raw)
		case '?', '#':
			return nil, fmt.Errorf("path %q must not contain %q: paths are matched without the query string", raw, string(c))
		case '*':
			return nil, fmt.Errorf("path %q must not contain \"*\": wildcards are not supported; use a {name} parameter for a segment", raw)
		default:
			if c <= ' ' || c == 0x7f {
				return nil, fmt.Errorf("path %q must not contain spaces or control characters", raw)
			}
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 {
		t.Parts = append(t.Parts, PathPart{Literal: lit.String()})
	}
	return t, nil
}

// HasParam reports whether the template defines the parameter name.
func (t *PathTemplate) HasParam(name string) bool {
	for _, p := range t.Params {
		if p == name {
			return true
		}
	}
	return false
}
