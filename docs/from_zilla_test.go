package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The differences from Zilla a user meets are rows of the one table in
// from-zilla.md, each with its reason, and configuration.md points there.
func TestDifferencesFromZillaTable(t *testing.T) {
	doc, err := os.ReadFile("from-zilla.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Behaviour differences\n")
	if !ok {
		t.Fatal("from-zilla.md has no Behaviour differences section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string][]string{} // topic → cells
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| topic ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		rows[cells[0]] = cells
	}
	for _, topic := range []string{
		"a path-only produce condition (`when: [{ path: … }]`)",
		"a method no route of the path accepts",
		"CORS preflight",
		"a long poll whose record is deleted",
		"`preference-applied`",
		"`304`",
		"a record or reply without `content-type`",
		"gRPC call status header",
		"a terminal gRPC reply without a status header",
		"gRPC `metadata` condition",
		"0 or 2 messages on a unary gRPC method",
		"headers Envoy adds (`x-request-id`, `x-forwarded-proto`, `x-forwarded-for`)",
		"header order in request records",
		"http route without `with`",
		"templated `with.topic`",
		"idempotency key",
		"broker refuses a record",
		"async follow-up `GET` without `prefer: wait`",
	} {
		cells, ok := rows[topic]
		switch {
		case !ok:
			t.Errorf("no row %q in the differences table", topic)
		case len(cells) != 4 || strings.TrimSpace(cells[3]) == "":
			t.Errorf("row %q: %d cells, want topic, Zilla, kafka-ext-proc and a reason", topic, len(cells))
		}
	}
	conf, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "(from-zilla.md#behaviour-differences)") {
		t.Error("configuration.md does not link to the differences table")
	}
}

// The rows of the differences table that tests prove name here the tests
// that prove them, and those tests exist: a renamed or deleted test leaves
// its row unproven, and this fails until the row is tied to a test again.
func TestDifferencesFromZillaRowsHaveTheirTests(t *testing.T) {
	proven := map[string][]string{
		"a path-only produce condition (`when: [{ path: … }]`)": {"TestPreflightOnDemoProduceRouteWritesNothing", "TestMethodMatrix"},
		"a method no route of the path accepts":                 {"TestWriteOnFetchOnlyPathIs405"},
		"CORS preflight":                                        {"TestCORSPreflightAnsweredByEnvoy", "TestImportedGRPCListenerAnswersCORS"},
		"a long poll whose record is deleted":                   {"TestLongPollWokenByDelete", "TestStaleTagOnDeletedItemAnswersAtOnce"},
		"`preference-applied`":                                  {"TestPreferenceAppliedOnlyWhenWaited"},
		"`304`":                                                 {"TestNotModifiedThroughEnvoy"},
		"a record or reply without `content-type`":              {"TestBodiesWithoutContentTypeAreOctetStream"},
		"gRPC call status header":                               {"TestZillaResponderStatusHeaders"},
		"a terminal gRPC reply without a status header":         {"TestZillaResponderStatusHeaders"},
		"gRPC `metadata` condition":                             {"TestZillaBinaryMetadataCondition"},
		"0 or 2 messages on a unary gRPC method":                {"TestUnaryCardinalityIsTheClientsAndResponders"},
		"headers Envoy adds (`x-request-id`, `x-forwarded-proto`, `x-forwarded-for`)": {"TestEnvoyAddedHeadersNotEchoed", "TestMirrorRepliesLeaveRequestOnlyMetadataOut"},
		"header order in request records":                                             {"TestRequestRecordKeepsHeaderOrder"},
		"idempotency key":                                                             {"TestIdempotencyKeyGrammar"},
		"a body that violates its schema":                                             {"TestModels", "TestModelsGRPC"},
	}
	doc, err := os.ReadFile("from-zilla.md")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range decl.FindAllSubmatch(b, -1) {
			tests[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for topic, names := range proven {
		if !strings.Contains(string(doc), "\n| "+topic+" | ") {
			t.Errorf("from-zilla.md has no row %q", topic)
		}
		for _, n := range names {
			if !tests[n] {
				t.Errorf("row %q: its test %s does not exist", topic, n)
			}
		}
	}
}

// Every refusal of from-zilla.md names its reason: each row of the refusal
// table has the Zilla feature and a non-empty why.
func TestZillaRefusalsHaveReasons(t *testing.T) {
	doc, err := os.ReadFile("from-zilla.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### Refused, with the reason\n")
	if !ok {
		t.Fatal("from-zilla.md has no refusal table")
	}
	section, _, _ = strings.Cut(section, "\n#")
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| Zilla ") {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 2 || len(strings.TrimSpace(cells[1])) < 20 {
			t.Errorf("refusal %q: want the feature and its reason", cells[0])
		}
	}
	for _, want := range []string{"`options.requests`", "`${headers.<name>}`", "`transforms`", "`oauthbearer` with a static token"} {
		if !strings.Contains(section, want) {
			t.Errorf("the refusal table does not cover %s", want)
		}
	}
	if rows < 10 {
		t.Errorf("%d refusal rows, want the whole table", rows)
	}
}
