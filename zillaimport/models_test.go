package zillaimport

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// zillaModels is Zilla's shape: catalogs at the top, topic models on the
// kafka cache bindings (cache_server repeating cache_client's block).
const zillaModels = `
name: models
catalogs:
  inline0:
    type: inline
    options:
      subjects:
        item: { schema: '{"type":"object","required":["name"]}', version: latest }
  sr0:
    type: karapace-schema-registry
    options: { url: "http://registry:8081", context: .staging, max-age: 300 }
bindings:
  north_http_kafka:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: PUT, path: "/items/{id}" }]
        exit: south_cache_client
        with: { capability: produce, topic: items, key: "${params.id}" }
  south_cache_client:
    type: kafka
    kind: cache_client
    options:
      topics:
        - name: items
          key: { model: string, maxLength: 64 }
          value: { model: json, catalog: { inline0: [{ subject: item }] } }
        - name: orders
          value: { model: avro, view: json, catalog: { sr0: [{ strategy: topic, version: latest }] } }
    exit: south_cache_server
  south_cache_server:
    type: kafka
    kind: cache_server
    options:
      topics:
        - name: items
          value: { model: json, catalog: { inline0: [{ subject: item }] } }
    exit: south_kafka_client
  south_kafka_client:
    type: kafka
    kind: client
    options: { servers: ["kafka:29092"] }
`

// TestModelsImported: the catalogs and the cache bindings' topic models
// arrive on the kafka client, and the imported configuration builds them.
func TestModelsImported(t *testing.T) {
	res, err := Import("zilla.yaml", []byte(zillaModels))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("imported.yaml", res.Config, func(string) (string, bool) { return "localhost:9092", true })
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Config)
	}
	k := cfg.Kafka["south_kafka_client"]
	items := k.Models("items")
	if items == nil || items.Key == nil || items.Value == nil || items.Value.Kind() != "json" {
		t.Fatalf("items: %+v\n%s", items, res.Config)
	}
	if _, err := items.Key.Encode(context.Background(), nil, []byte(strings.Repeat("k", 65))); err == nil {
		t.Error("maxLength 64 was not imported: a 65-character key passed")
	}
	if _, err := items.Value.Encode(context.Background(), nil, []byte(`{}`)); err == nil {
		t.Error("the inline JSON Schema was not imported: {} passed")
	}
	if orders := k.Models("orders"); orders == nil || orders.Value.Kind() != "avro" || !orders.Value.JSON() {
		t.Errorf("orders: %+v", orders)
	}
	regs := cfg.Registries()
	if len(regs) != 1 || regs[0].Name() != "sr0" {
		t.Errorf("registries %v, want sr0", regs)
	}
	for _, want := range []string{"context: .staging", `max-age: "300s"`, "url: http://registry:8081"} {
		if !strings.Contains(string(res.Config), want) {
			t.Errorf("the import does not say %q:\n%s", want, res.Config)
		}
	}
}

// A catalog whose url is a variable named for a server (Zilla's examples
// write ${{env.SCHEMA_REGISTRY_SERVER}}) imports: the importer checks its
// output with a URL standing for that variable, not a broker address.
func TestCatalogURLFromAServerVariable(t *testing.T) {
	src := strings.Replace(zillaModels, `url: "http://registry:8081"`, `url: "${{env.SCHEMA_REGISTRY_SERVER}}"`, 1)
	if src == zillaModels {
		t.Fatal("the models example has no registry url to replace")
	}
	res, err := Import("zilla.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Config), `url: "${env:SCHEMA_REGISTRY_SERVER}"`) {
		t.Errorf("the catalog's url is not the variable:\n%s", res.Config)
	}
}

// A karapace catalog (type karapace, or karapace-schema-registry) is a
// Schema Registry catalog: Karapace speaks the Confluent API.
func TestKarapaceCatalog(t *testing.T) {
	res, err := Import("http.kafka.karapace.yaml", mustRead(t, "testdata/examples/http.kafka.karapace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SCHEMA_REGISTRY_URL": "http://karapace:8081", "KAFKA_BOOTSTRAP_SERVER": "kafka:9092"}
	cfg, err := config.Parse("imported.yaml", res.Config, func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Config)
	}
	if regs := cfg.Registries(); len(regs) != 1 || regs[0].Name() != "registry0" {
		t.Errorf("registries %v, want registry0", regs)
	}
	if !strings.Contains(string(res.Config), "type: schema-registry") || !strings.Contains(string(res.Config), "# a karapace catalog") {
		t.Errorf("the karapace catalog is not a schema-registry catalog with its note:\n%s", res.Config)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A filesystem catalog's paths are relative to the zilla.yaml, as Zilla
// reads them: the import writes them as seen from where it ran, says so,
// and the result loads from there.
func TestFilesystemCatalogPathsFollowTheInput(t *testing.T) {
	const in = "testdata/examples/http.kafka.proto.json.yaml"
	res, err := Import(in, mustRead(t, in))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"path: testdata/examples/protos/item.proto", "# paths resolved against the directory of " + in} {
		if !strings.Contains(string(res.Config), want) {
			t.Errorf("the import does not say %q:\n%s", want, res.Config)
		}
	}
	cfg, err := config.Parse("config.yaml", res.Config, func(string) (string, bool) { return "localhost:9092", true })
	if err != nil {
		t.Fatalf("saved in the directory the import ran in, it does not load: %v", err)
	}
	if m := cfg.Kafka["brokers"].Models("items"); m == nil || m.Value.Kind() != "protobuf" {
		t.Errorf("items: %+v, want the protobuf model", m)
	}
}

// Zilla's `context: default` is the registry's default context, which here
// is no context at all: a context named "default" would read other
// subjects.
func TestRegistryDefaultContextDropped(t *testing.T) {
	res, err := Import("http.kafka.karapace.yaml", mustRead(t, "testdata/examples/http.kafka.karapace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Config), "context: default\n") || !strings.Contains(string(res.Config), "# context: default dropped") {
		t.Errorf("context: default is kept, or its drop is not said:\n%s", res.Config)
	}
}
