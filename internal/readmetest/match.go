package readmetest

import (
	"fmt"
	"regexp"
	"strings"
)

// placeholderRE is a placeholder of an expected output or a command: a
// variable part such as <etag> or <cid>.
var placeholderRE = regexp.MustCompile(`<([a-z][a-z0-9-]*)>`)

// Ellipsis in an expected output matches any text, each time anew: a part
// that varies and that no later step uses.
const Ellipsis = "..."

// Vars are the values placeholders took, by name.
type Vars map[string]string

// Match reports whether got matches want, where each placeholder of want
// matches one or more characters: the value it already has in vars, else
// any, and then the same wherever it occurs again; an Ellipsis matches any
// text. The values of new placeholders are added to vars only on a match.
func Match(want, got string, vars Vars) bool {
	var re strings.Builder
	re.WriteString(`(?s)^`)
	var names []string
	last := 0
	literal := func(s string) {
		parts := strings.Split(s, Ellipsis)
		for i, p := range parts {
			if i > 0 {
				re.WriteString(`(?:.*?)`)
			}
			re.WriteString(regexp.QuoteMeta(p))
		}
	}
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(want, -1) {
		literal(want[last:m[0]])
		name := want[m[2]:m[3]]
		if v, ok := vars[name]; ok {
			re.WriteString(regexp.QuoteMeta(v))
		} else {
			re.WriteString(`(.+?)`)
			names = append(names, name)
		}
		last = m[1]
	}
	literal(want[last:])
	re.WriteString(`$`)
	sub := regexp.MustCompile(re.String()).FindStringSubmatch(got)
	if sub == nil {
		return false
	}
	found := Vars{}
	for i, name := range names {
		if v, ok := found[name]; ok && v != sub[i+1] {
			return false
		}
		found[name] = sub[i+1]
	}
	for k, v := range found {
		vars[k] = v
	}
	return true
}

// Expand replaces the placeholders of s with their values; a placeholder
// without one is an error (the README uses it before a step shows it).
func Expand(s string, vars Vars) (string, error) {
	var err error
	out := placeholderRE.ReplaceAllStringFunc(s, func(p string) string {
		name := p[1 : len(p)-1]
		v, ok := vars[name]
		if !ok && err == nil {
			err = fmt.Errorf("placeholder %s has no value yet: no earlier output showed it", p)
		}
		return v
	})
	return out, err
}

// NormalizeSpace collapses every run of white space into one blank and
// trims the ends, so that outputs compare regardless of indentation and
// line breaks. ASCII record separators (grpcurl's text format puts one
// before every message after the first) count as white space.
func NormalizeSpace(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\x1e'
	}), " ")
}
