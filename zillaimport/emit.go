package zillaimport

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// omap is an ordered YAML map whose entries may carry comments: the imported
// configuration is written by hand rather than by a YAML library so that each
// comment sits right above the entry it explains.
type omap struct {
	entries []oentry
}

type oentry struct {
	key     string
	val     any // *omap, []any, string, int or bool
	comment []string
}

// set appends key (or replaces its value, keeping its place and comments).
func (m *omap) set(key string, val any, comment ...string) {
	for i := range m.entries {
		if m.entries[i].key == key {
			m.entries[i].val = val
			m.entries[i].comment = append(m.entries[i].comment, comment...)
			return
		}
	}
	m.entries = append(m.entries, oentry{key: key, val: val, comment: comment})
}

func (m *omap) get(key string) any {
	for _, e := range m.entries {
		if e.key == key {
			return e.val
		}
	}
	return nil
}

// comment adds comment lines above key.
func (m *omap) comment(key string, lines ...string) {
	for i := range m.entries {
		if m.entries[i].key == key {
			m.entries[i].comment = append(m.entries[i].comment, lines...)
			return
		}
	}
}

// plainRe is what may stay unquoted: no YAML indicator, no leading or
// trailing space, nothing a YAML reader would take for another type.
var plainRe = regexp.MustCompile(`^[A-Za-z_/.][A-Za-z0-9_./:@-]*$`)

func scalar(s string) string {
	switch strings.ToLower(s) {
	case "", "true", "false", "yes", "no", "on", "off", "null", "~", "y", "n":
		return strconv.Quote(s)
	}
	if plainRe.MatchString(s) && !strings.HasSuffix(s, ":") {
		return s
	}
	// JSON string escapes are valid in YAML double-quoted scalars.
	return strconv.Quote(s)
}

func writeComments(b *strings.Builder, indent string, lines []string) {
	for _, l := range lines {
		for _, part := range strings.Split(l, "\n") {
			fmt.Fprintf(b, "%s# %s\n", indent, part)
		}
	}
}

// emit writes v as block YAML at the given indentation.
func emit(b *strings.Builder, v any, indent string) {
	switch t := v.(type) {
	case *omap:
		for _, e := range t.entries {
			writeComments(b, indent, e.comment)
			emitEntry(b, indent, scalar(e.key)+":", e.val)
		}
	case []any:
		for _, it := range t {
			emitEntry(b, indent, "-", it)
		}
	}
}

func emitEntry(b *strings.Builder, indent, head string, val any) {
	switch t := val.(type) {
	case *omap:
		if len(t.entries) == 0 {
			fmt.Fprintf(b, "%s%s {}\n", indent, head)
			return
		}
		if head == "-" {
			// The first entry goes on the dash's line.
			var sub strings.Builder
			emit(&sub, t, indent+"  ")
			s := sub.String()
			if len(t.entries[0].comment) > 0 {
				fmt.Fprintf(b, "%s-\n%s", indent, s)
				return
			}
			fmt.Fprintf(b, "%s- %s", indent, strings.TrimPrefix(s, indent+"  "))
			return
		}
		fmt.Fprintf(b, "%s%s\n", indent, head)
		emit(b, t, indent+"  ")
	case []any:
		if len(t) == 0 {
			fmt.Fprintf(b, "%s%s []\n", indent, head)
			return
		}
		fmt.Fprintf(b, "%s%s\n", indent, head)
		emit(b, t, indent+"  ")
	case string:
		fmt.Fprintf(b, "%s%s %s\n", indent, head, scalar(t))
	case int:
		fmt.Fprintf(b, "%s%s %d\n", indent, head, t)
	case bool:
		fmt.Fprintf(b, "%s%s %t\n", indent, head, t)
	default:
		panic(fmt.Sprintf("zillaimport: cannot emit %T", val))
	}
}
