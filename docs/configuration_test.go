// Package docs holds the user documentation; its test keeps the
// configuration reference in step with the JSON Schema.
package docs

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// Every property the schema defines is named in the reference.
func TestConfigurationReferenceCoversTheSchema(t *testing.T) {
	doc, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var schema any
	if err := json.Unmarshal(config.Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for name := range props {
					names[name] = true
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(schema)
	if len(names) < 40 {
		t.Fatalf("found only %d property names in the schema: the walk is broken", len(names))
	}
	var missing []string
	text := string(doc)
	for name := range names {
		// A field is documented as `name`, `a.name` or `a.name.b` in a table cell.
		if !strings.Contains(text, "`"+name+"`") && !strings.Contains(text, "."+name+"`") && !strings.Contains(text, "`"+name+".") && !strings.Contains(text, "."+name+".") {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("the configuration reference does not mention: %s", strings.Join(missing, ", "))
	}
}
