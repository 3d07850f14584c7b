package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// A binding's view-store puts its views on disk, and a topic's entry
// overrides it either way; a relative directory is taken from the file's.
func TestViewStoreChoosesDiskPerClusterAndTopic(t *testing.T) {
	yaml := "bindings:\n" +
		"  kafka0:\n    type: kafka\n    kind: client\n    options:\n" +
		"      bootstrap.servers: k:9092\n" +
		"      view-store: {type: disk, directory: views}\n" +
		"      topics:\n        - {name: small, view-store: memory}\n" +
		"  kafka1:\n    type: kafka\n    kind: client\n    options:\n" +
		"      bootstrap.servers: k:9092\n" +
		"      view-store: {directory: /var/views}\n" +
		"      topics:\n        - {name: 'big-*', view-store: disk}\n"
	cfg, err := Parse(filepath.Join("conf", "c.yaml"), []byte(yaml), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Close()
	k0, k1 := cfg.Kafka["kafka0"], cfg.Kafka["kafka1"]
	if _, ok := k0.Properties["view-store"]; ok {
		t.Error("view-store reached the librdkafka properties")
	}
	if want := filepath.Join("conf", "views"); k0.ViewStore.Directory != want {
		t.Errorf("directory %q, want %q", k0.ViewStore.Directory, want)
	}
	for _, c := range []struct {
		k     *KafkaCluster
		topic string
		disk  bool
	}{{k0, "items", true}, {k0, "small", false}, {k1, "big-a", true}, {k1, "items", false}} {
		if got := c.k.ViewOnDisk(c.topic); got != c.disk {
			t.Errorf("%s %s on disk: %v, want %v", c.k.Name, c.topic, got, c.disk)
		}
	}
	if !k0.AnyViewOnDisk() || !k1.AnyViewOnDisk() {
		t.Error("both bindings have views on disk")
	}
}

func TestViewStoreErrors(t *testing.T) {
	head := "bindings:\n  kafka0:\n    type: kafka\n    kind: client\n    options:\n      bootstrap.servers: k:9092\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"disk without a directory", head + "      view-store: {type: disk}\n",
			`c.yaml:7:19: missing required field "directory" in view-store`},
		{"a topic on disk without a directory", head + "      topics: [{name: t, view-store: disk}]\n",
			`c.yaml:6:7: a topic's view-store is disk, but the binding has no view-store.directory`},
		{"unknown type", head + "      view-store: {type: ssd, directory: d}\n",
			`c.yaml:7:26: unknown view store "ssd" in type; allowed: memory, disk`},
		{"unknown field", head + "      view-store: {type: disk, dir: d}\n",
			`c.yaml:7:32: unknown field "dir" in view-store; allowed: type, directory`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(c.yaml), testEnv)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
