package route

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// SplitPath splits a :path into the path and the raw query (without '?').
func SplitPath(p string) (path, query string) {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return p, ""
}

// pathMatcher is a compiled path template.
type pathMatcher struct {
	parts  []config.PathPart
	names  []string       // parameter names in order
	greedy *regexp.Regexp // set when the simple scan cannot decide (see compilePath)
}

func compilePath(t *config.PathTemplate) (*pathMatcher, error) {
	if t == nil {
		return nil, nil
	}
	parts := t.Parts
	if len(parts) == 0 && t.Raw != "" {
		// A hand-built template with only Raw set.
		pt, err := config.ParsePathTemplate(t.Raw)
		if err != nil {
			return nil, err
		}
		parts = pt.Parts
	}
	m := &pathMatcher{parts: parts}
	simple := true
	for i, p := range parts {
		if p.Param == "" {
			continue
		}
		m.names = append(m.names, p.Param)
		// The scan takes a parameter up to the next separator; that is the only
		// possible split when what follows starts with a separator or ends
		// the path. Otherwise fall back to a (linear-time) RE2 expression.
		if i+1 < len(parts) {
			next := parts[i+1]
			if next.Param != "" || next.Literal == "" || (next.Literal[0] != '/' && next.Literal[0] != ';') {
				simple = false
			}
		}
	}
	if !simple {
		var b strings.Builder
		b.WriteString("^")
		for _, p := range parts {
			if p.Param != "" {
				b.WriteString("([^/;?]+)")
			} else {
				b.WriteString(regexp.QuoteMeta(latin1(p.Literal)))
			}
		}
		b.WriteString("$")
		re, err := regexp.Compile(b.String())
		if err != nil {
			return nil, fmt.Errorf("compiling path template %q: %w", t.Raw, err)
		}
		m.greedy = re
	}
	return m, nil
}

// match reports whether path matches, appending the [start, end) offsets of
// each parameter value to spans.
func (m *pathMatcher) match(path string, spans []int) ([]int, bool) {
	if m.greedy != nil {
		// RE2 matches runes; mapping each byte to the rune of the same value
		// makes the match byte-exact for any path, valid UTF-8 or not.
		lp := latin1(path)
		idx := m.greedy.FindStringSubmatchIndex(lp)
		if idx == nil {
			return spans, false
		}
		for _, off := range idx[2:] {
			if len(lp) != len(path) {
				off = utf8.RuneCountInString(lp[:off])
			}
			spans = append(spans, off)
		}
		return spans, true
	}
	pos := 0
	for _, p := range m.parts {
		if p.Param == "" {
			if !strings.HasPrefix(path[pos:], p.Literal) {
				return spans, false
			}
			pos += len(p.Literal)
			continue
		}
		end := pos
		for end < len(path) && !isSeparator(path[end]) {
			end++
		}
		if end == pos {
			return spans, false
		}
		spans = append(spans, pos, end)
		pos = end
	}
	return spans, pos == len(path)
}

// latin1 maps every byte of s to the rune of the same value (identity for
// ASCII, which is what paths nearly always are).
func latin1(s string) string {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, 0, len(s)+len(s)-i)
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		b = utf8.AppendRune(b, rune(s[i]))
	}
	return string(b)
}

func isSeparator(c byte) bool { return c == '/' || c == ';' || c == '?' }

// params builds the parameter map of a successful match.
func (m *pathMatcher) params(path string, spans []int) map[string]string {
	if len(m.names) == 0 {
		return nil
	}
	out := make(map[string]string, len(m.names))
	for i, name := range m.names {
		out[name] = unescape(path[spans[2*i]:spans[2*i+1]])
	}
	return out
}

func unescape(v string) string {
	if strings.IndexByte(v, '%') < 0 {
		return v
	}
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}
