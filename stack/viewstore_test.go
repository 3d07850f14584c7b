package stack

import (
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// Views are opened in their store when the clusters start: a reload that
// moves a binding's or a topic's views between memory and disk, or to
// another directory, is refused (a restart applies it).
func TestReloadRefusesAChangedViewStore(t *testing.T) {
	file := func(options string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("c.yaml", []byte(`bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092`+options+` }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
`), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	disk := ", view-store: { type: disk, directory: /var/views }"
	if err := sameKafka(file(disk), file(disk)); err != nil {
		t.Fatalf("the same view store: %v", err)
	}
	topic := func(store string) string { return disk + ", topics: [{ name: items, view-store: " + store + " }]" }
	for _, c := range []struct{ name, old, next string }{
		{"to memory", disk, ""},
		{"another directory", disk, ", view-store: { type: disk, directory: /var/other }"},
		{"memory, typed", disk, ", view-store: { type: memory, directory: /var/views }"},
		{"a topic to memory", topic("disk"), topic("memory")},
	} {
		err := sameKafka(file(c.old), file(c.next))
		if err == nil || !strings.Contains(err.Error(), "the view store of kafka binding \"kafka0\" changed") {
			t.Errorf("%s: %v, want the view store's change refused", c.name, err)
		}
	}
}
