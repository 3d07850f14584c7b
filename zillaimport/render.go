package zillaimport

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// render writes the imported configuration with its comments.
func (im *importer) render() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Imported from %s by `kafka-ext-proc import zilla`.\n", im.file)
	b.WriteString("# Server bindings (tcp, tls, http, grpc) are Envoy's job: see the --envoy output.\n")
	if len(im.notes) > 0 {
		b.WriteString("#\n# Dropped or changed (zilla.yaml lines):\n")
		slices.SortStableFunc(im.notes, func(a, b note) int { return cmp.Compare(a.line, b.line) })
		for _, n := range im.notes {
			for _, l := range strings.Split(fmt.Sprintf("line %d: %s", n.line, n.text), "\n") {
				fmt.Fprintf(&b, "#   %s\n", l)
			}
		}
	}
	top := &omap{}
	if len(im.catalogs.entries) > 0 {
		top.set("catalogs", im.catalogs)
	}
	bindings := &omap{}
	bindings.entries = append(append(bindings.entries, im.kafka.entries...), im.procs.entries...)
	top.set("bindings", bindings)
	if len(im.guards.entries) > 0 {
		top.set("guards", im.guards)
	}
	emit(&b, top, "")
	return []byte(b.String())
}
