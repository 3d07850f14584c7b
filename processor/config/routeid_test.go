package config

import (
	"os"
	"strings"
	"testing"
)

const routeIDConfig = `
bindings:
  k: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  h:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: k
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ path: "/events/{id}" }]
        exit: k
        with: { capability: fetch, topic: events, filters: [{ key: "${params.id}" }] }
      - id: orders-in
        when: [{ method: POST, path: "/orders" }]
        exit: k
        with: { capability: produce, topic: orders }
      - exit: k
        with: { capability: produce, topic: rest }
  g:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: example.Items/Get }]
        exit: k
        with: { capability: fetch, topic: items }
      - when: [{ service: example.Orders }]
        exit: k
        with: { capability: produce, topic: orders }
`

func routeIDs(t *testing.T, cfg *Config) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, b := range cfg.Bindings {
		for _, r := range b.Routes {
			out[b.Name] = append(out[b.Name], r.ID)
		}
	}
	return out
}

func TestRouteIDsDefaultToWhatTheRouteMatches(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte(routeIDConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := routeIDs(t, cfg)
	want := map[string][]string{
		"h": {"GET:/items/{id}", "*:/events/{id}", "orders-in", "produce:rest"},
		"g": {"example.Items/Get", "example.Orders"},
	}
	for b, ids := range want {
		if strings.Join(got[b], " ") != strings.Join(ids, " ") {
			t.Errorf("binding %s: ids %q, want %q", b, got[b], ids)
		}
	}
}

func TestRouteIDsMustBeUnique(t *testing.T) {
	// One condition, two topics (told apart by guards, say): each adds its topic.
	twoTopics := strings.Replace(routeIDConfig, `path: "/events/{id}"`, `method: GET, path: "/items/{id}"`, 1)
	cfg, err := Parse("c.yaml", []byte(twoTopics), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ids := routeIDs(t, cfg)["h"]; ids[0] != "GET:/items/{id} fetch:items" || ids[1] != "GET:/items/{id} fetch:events" {
		t.Errorf("routes of one condition: ids %q, want each with its capability:topic", ids)
	}
	sameTopic := strings.Replace(twoTopics, "topic: events", "topic: items", 1)
	_, err = Parse("c.yaml", []byte(sameTopic), nil)
	if err == nil || !strings.Contains(err.Error(), `c.yaml:11:9: routes[1]: its default id "GET:/items/{id} fetch:items" is also routes[0]'s (line 8)`) {
		t.Errorf("two routes with one condition and topic: %v", err)
	}
	dupExplicit := strings.Replace(routeIDConfig, `- exit: k`, `- id: orders-in
        exit: k`, 1)
	_, err = Parse("c.yaml", []byte(dupExplicit), nil)
	if err == nil || !strings.Contains(err.Error(), `c.yaml:18:13: routes[3]: its id "orders-in" is also routes[2]'s (line 14)`) {
		t.Errorf("two routes with one id: %v", err)
	}
	long := strings.Replace(routeIDConfig, `id: orders-in`, `id: `+strings.Repeat("x", 129), 1)
	_, err = Parse("c.yaml", []byte(long), nil)
	if err == nil || !strings.Contains(err.Error(), `c.yaml:14:13: id is 129 bytes long; at most 128`) {
		t.Errorf("a long id: %v", err)
	}
}

// The files a configuration reads are listed, so a watcher can reload on them.
func TestConfigListsTheFilesItReads(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/pw", "secret\n")
	cfgText := strings.Replace(routeIDConfig, `bootstrap.servers: "localhost:9092"`, `bootstrap.servers: "localhost:9092", sasl.password: "${file:pw}"`, 1)
	cfg, err := Parse(dir+"/c.yaml", []byte(cfgText), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Files) != 1 || cfg.Files[0] != dir+"/pw" {
		t.Errorf("files %q, want [%s/pw]", cfg.Files, dir)
	}
	if cfg.Kafka["k"].Properties["sasl.password"] != "secret" {
		t.Errorf("password %q", cfg.Kafka["k"].Properties["sasl.password"])
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
