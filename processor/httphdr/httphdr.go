// Package httphdr parses the request headers the bindings act on: Prefer
// (RFC 7240) and If-None-Match (RFC 9110 §13.1.2). Parsing is lenient where
// the RFCs ask it to be: invalid preferences are ignored, not refused.
package httphdr

import (
	"strconv"
	"strings"
	"time"
)

// Prefs are the preferences of a request's Prefer headers.
type Prefs struct {
	Wait         time.Duration // wait=N, when WaitSet
	WaitSet      bool
	RespondAsync bool // respond-async
}

// ParsePrefer reads every Prefer header value. Preferences are
// comma-separated `token[=value]` with optional `;` parameters (ignored);
// names are case-insensitive; values may be quoted. The first valid
// instance of a preference counts (RFC 7240 §2); an invalid wait (not a
// non-negative integer of seconds) is ignored.
func ParsePrefer(values []string) Prefs {
	var p Prefs
	for _, v := range values {
		for v != "" {
			var item string
			if item, v = cutList(v); item == "" {
				continue
			}
			if i := strings.IndexByte(item, ';'); i >= 0 {
				item = item[:i]
			}
			name, val, _ := strings.Cut(item, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			val = unquote(strings.TrimSpace(val))
			switch name {
			case "respond-async":
				p.RespondAsync = true
			case "wait":
				if p.WaitSet {
					continue
				}
				n, err := strconv.ParseUint(val, 10, 32)
				if err != nil {
					continue
				}
				p.Wait, p.WaitSet = time.Duration(n)*time.Second, true
			}
		}
	}
	return p
}

// IfNoneMatch is a parsed If-None-Match header.
type IfNoneMatch struct {
	Any  bool     // `*`
	Tags []string // opaque tags without quotes or W/
}

// ParseIfNoneMatch reads every If-None-Match value: `*`, or a list of entity
// tags, strong (`"x"`), weak (`W/"x"`) or, for clients that drop the
// quotes, bare (`x`). Empty elements are skipped.
func ParseIfNoneMatch(values []string) IfNoneMatch {
	var m IfNoneMatch
	for _, v := range values {
		for v != "" {
			var item string
			if item, v = cutList(v); item == "" {
				continue
			}
			if item == "*" {
				m.Any = true
				continue
			}
			item = unquote(strings.TrimPrefix(item, "W/"))
			if item != "" {
				m.Tags = append(m.Tags, item)
			}
		}
	}
	return m
}

// Present reports whether the header was sent with anything in it.
func (m IfNoneMatch) Present() bool { return m.Any || len(m.Tags) > 0 }

// Matches reports whether the current representation's entity tag (opaque,
// without quotes) matches, by the weak comparison If-None-Match uses. An
// empty tag (no current representation) matches nothing, not even `*`.
func (m IfNoneMatch) Matches(tag string) bool {
	if tag == "" {
		return false
	}
	if m.Any {
		return true
	}
	for _, t := range m.Tags {
		if t == tag {
			return true
		}
	}
	return false
}

// Quote renders an opaque tag as a strong entity tag.
func Quote(tag string) string { return `"` + tag + `"` }

// ValidTag reports whether s can be an opaque entity tag: etagc characters
// only (RFC 9110 §8.8.3: no DQUOTE, no controls, no space).
func ValidTag(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c <= 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// cutList returns the first element of a comma-separated header value
// (commas inside quoted strings do not separate), without surrounding
// space, and the rest after its comma. Walking a list this way allocates
// nothing.
// ListLen counts the non-empty elements of a comma-separated field value;
// commas inside quoted strings separate nothing. Envoy hands repeated
// copies of some headers (content-type among them) over as one value
// joined with ",", so a field that allows one value shows its repeats here.
func ListLen(v string) int {
	n := 0
	for v != "" {
		var item string
		if item, v = cutList(v); item != "" {
			n++
		}
	}
	return n
}

func cutList(v string) (item, rest string) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			quoted = !quoted
		case '\\':
			if quoted {
				i++
			}
		case ',':
			if !quoted {
				return strings.TrimSpace(v[:i]), v[i+1:]
			}
		}
	}
	return strings.TrimSpace(v), ""
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}
