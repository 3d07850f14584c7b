package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/testpki"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// yamlBlocks are the ```yaml blocks of a Markdown file, unindented (blocks
// inside list items are indented).
func yamlBlocks(doc string) []string {
	re := regexp.MustCompile("(?ms)^( *)```yaml\n(.*?)^ *```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		var b strings.Builder
		for _, line := range strings.Split(m[2], "\n") {
			b.WriteString(strings.TrimPrefix(line, m[1]) + "\n")
		}
		out = append(out, b.String())
	}
	return out
}

// Every kafka binding docs/kafka.md shows is accepted by librdkafka as the
// processor would build its clients (without connecting): certificate and
// key files are real ones made here, secrets are placeholders, and the OIDC
// token endpoint is a closed port on loopback, so nothing leaves the machine.
func TestKafkaDocPropertiesAcceptedByLibrdkafka(t *testing.T) {
	doc, err := os.ReadFile("kafka.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, err := testpki.NewCA("docs CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Client("docs")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.Write(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"ssl.ca.location": caFile, "ssl.certificate.location": certFile, "ssl.key.location": keyFile}

	check := func(props map[string]string) []client.PropertyError {
		for k, v := range props {
			switch {
			case files[k] != "":
				props[k] = files[k]
			case k == "sasl.oauthbearer.token.endpoint.url":
				props[k] = "http://127.0.0.1:1/token"
			case strings.HasPrefix(v, "${"):
				props[k] = "placeholder"
			}
		}
		return client.CheckProperties(props)
	}

	checked := 0
	var first map[string]string
	for _, block := range yamlBlocks(string(doc)) {
		var cfg struct {
			Bindings map[string]struct {
				Type    string            `json:"type"`
				Options map[string]string `json:"options"`
			} `json:"bindings"`
		}
		if err := yaml.Unmarshal([]byte(block), &cfg); err != nil {
			t.Fatalf("block does not parse: %v\n%s", err, block)
		}
		for name, b := range cfg.Bindings {
			if b.Type != "kafka" {
				continue
			}
			if first == nil {
				first = map[string]string{}
				for k, v := range b.Options {
					first[k] = v
				}
			}
			if errs := check(b.Options); len(errs) != 0 {
				t.Errorf("binding %s of\n%s\nrefused: %v", name, block, errs)
			}
			checked++
		}
	}
	if checked < 9 {
		t.Fatalf("checked %d kafka bindings, want every example (at least 9)", checked)
	}
	// The check can fail: a misspelt property of the first example.
	first["sasl.mechansm"] = "PLAIN"
	if errs := check(first); len(errs) != 1 || errs[0].Property != "sasl.mechansm" {
		t.Fatalf("a misspelt property: %v", errs)
	}
}

// The table of the properties the processor sets in docs/kafka.md is
// client.Properties as it is: a row changed in the code changes the docs.
func TestKafkaDocListsThePropertiesTheProcessorSets(t *testing.T) {
	doc, err := os.ReadFile("kafka.md")
	if err != nil {
		t.Fatal(err)
	}
	want := client.PropertiesMarkdown()
	header, _, _ := strings.Cut(want, "\n")
	var got strings.Builder
	in := false
	for _, line := range strings.Split(string(doc), "\n") {
		if line == header {
			in = true
		}
		if in && !strings.HasPrefix(line, "|") {
			break
		}
		if in {
			got.WriteString(line + "\n")
		}
	}
	if got.String() != want {
		t.Errorf("the table in kafka.md under %q is not client.PropertiesMarkdown(); replace it with:\n%s", header, want)
	}
}
