package docs

import (
	"os"
	"strings"
	"testing"
)

// The page for service authors is found where they start: the README's
// first screen (before its first section) and the import's refusal of a
// kafka-grpc binding, whose users must write such a service.
func TestServiceContractIsLinked(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(readme), "\n## ")
	if !strings.Contains(first, "(docs/service-contract.md)") {
		t.Error("the README's first screen does not link docs/service-contract.md")
	}
	imp, err := os.ReadFile("../zillaimport/import.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(imp), "a kafka-grpc binding") || !strings.Contains(string(imp), "docs/service-contract.md says what to read and write") {
		t.Error("import zilla's kafka-grpc refusal does not name docs/service-contract.md")
	}
}
