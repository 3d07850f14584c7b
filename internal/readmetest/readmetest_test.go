package readmetest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	_ "google.golang.org/grpc/health/grpc_health_v1" // a registered service for the -proto check
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestShellWords(t *testing.T) {
	for line, want := range map[string][]string{
		`curl -i 'http://h/x;cid=1' -H "a: \"b\"" # note`: {"curl", "-i", "http://h/x;cid=1", "-H", `a: "b"`},
		`printf '\001\002' | base64`:                      {"printf", `\001\002`, "|", "base64"},
		`grpcurl -d '' x &`:                               {"grpcurl", "-d", "", "x", "&"},
		`a\ b 'c'"d"e`:                                    {"a b", "cde"},
	} {
		got, err := ShellWords(line)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %q %v, want %q", line, got, err, want)
		}
	}
	for _, bad := range []string{`a 'b`, `a "b`, `a $HOME`, `a "$HOME"`, `a;b`, `a > f`, `a|b`, `a &b`, `x \`} {
		if w, err := ShellWords(bad); err == nil {
			t.Errorf("%s: %q, want an error", bad, w)
		}
	}
}

func TestParseCurl(t *testing.T) {
	c, err := ParseCurl(`curl -i -X POST 'http://h/x;cid=1' -H 'content-type: application/json' -H 'prefer: respond-async, wait=5' -d '{"a": 1}'   # note`)
	if err != nil || c.Method != "POST" || c.URL != "http://h/x;cid=1" || c.Body != `{"a": 1}` || !c.HasBody || !c.Include || len(c.Headers) != 2 ||
		c.Headers[1] != [2]string{"prefer", "respond-async, wait=5"} {
		t.Fatalf("%+v %v", c, err)
	}
	if v, ok := c.Header("Prefer"); !ok || v != "respond-async, wait=5" {
		t.Errorf("Header: %q %v", v, ok)
	}
	if c, err := ParseCurl(`curl 'http://h/' --data-binary 'x'`); err != nil || c.Method != "POST" || c.Include {
		t.Errorf("--data-binary without -X: %+v %v", c, err)
	}
	if c, err := ParseCurl(`curl -s http://h/`); err != nil || c.Method != "GET" || c.HasBody {
		t.Errorf("GET: %+v %v", c, err)
	}
	if c, err := ParseCurl(`curl -N --max-time 2.5 http://h/ -H 'accept: text/event-stream'`); err != nil || c.MaxTime != 2500*time.Millisecond || c.Include {
		t.Errorf("a stream with --max-time: %+v %v", c, err)
	}
	for _, bad := range []string{`curl -X`, `curl 'http://h`, `curl --form x http://h`, `curl -i`, `curl -d @file http://h`, `wget http://h`,
		`curl -m 0 http://h/`, `curl -m soon http://h/`} {
		if _, err := ParseCurl(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

const readme = "# Example\n\n## Steps\n\n" +
	"1. Start:\n\n   ```sh\n   go run ./cmd/x dev --config c.yaml\n   ```\n\n" +
	"2. Two commands, the second with output:\n\n   ```sh\n   # a comment\n   echo 'v' | kcat -P -b 127.0.0.1:9092 -t t\n   curl -i \\\n     'http://127.0.0.1:8080/x'\n   ```\n   prints\n   ```http\n   HTTP/1.1 200 OK\n   etag: <etag>\n\n   body\n   ```\n\n" +
	"3. Background:\n\n```sh\ncurl -i 'http://127.0.0.1:8080/x' -H 'if-none-match: <etag>' &\n```\n```text\nHTTP/1.1 304 Not Modified\n```\n\n" +
	"## Notes\n\n```sh\nnot a step\n```\n"

func TestParse(t *testing.T) {
	steps, err := Parse(readme, "## Steps")
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Line: 8, Command: "go run ./cmd/x dev --config c.yaml"},
		{Line: 15, Command: "echo 'v' | kcat -P -b 127.0.0.1:9092 -t t"},
		{Line: 16, Command: "curl -i  'http://127.0.0.1:8080/x'", Output: "HTTP/1.1 200 OK\netag: <etag>\n\nbody", HasOutput: true},
		{Line: 30, Command: "curl -i 'http://127.0.0.1:8080/x' -H 'if-none-match: <etag>'", Background: true, Output: "HTTP/1.1 304 Not Modified", HasOutput: true},
	}
	if !slices.Equal(steps, want) {
		t.Fatalf("steps\n%+v\nwant\n%+v", steps, want)
	}
	for name, bad := range map[string]string{
		"no section":         "# x\n```sh\na\n```\n",
		"output first":       "## Steps\n```text\nx\n```\n",
		"two outputs":        "## Steps\n```sh\na\n```\n```text\nx\n```\n```text\ny\n```\n",
		"unterminated":       "## Steps\n```sh\na\n",
		"empty sh block":     "## Steps\n```sh\n# only a comment\n```\n",
		"no sh block at all": "## Steps\ntext\n## Next\n```sh\na\n```\n",
	} {
		if _, err := Parse(bad, "## Steps"); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestMatch(t *testing.T) {
	vars := Vars{}
	if !Match(`etag: <etag>`, `etag: "a.0"`, vars) || vars["etag"] != `"a.0"` {
		t.Fatalf("binding: %v", vars)
	}
	if Match(`<etag>`, `"b.1"`, vars) || !Match(`x <etag> y`, `x "a.0" y`, vars) {
		t.Error("a bound placeholder must match its value only")
	}
	if !Match(`<a>/<b>/<a>`, `1/2/1`, vars) || vars["a"] != "1" || vars["b"] != "2" {
		t.Errorf("repeated placeholder: %v", vars)
	}
	if Match(`<c>-<c>`, `1-2`, vars) || vars["c"] != "" {
		t.Errorf("an inconsistent repeat matched: %v", vars)
	}
	if !Match("Message: ...\nend", "Message: the call's grpc-timeout (2.9s) elapsed\nend", vars) || !Match("a...b", "ab", vars) {
		t.Error("the ellipsis matches any text")
	}
	if Match("a.c", "abc", vars) || Match("a", "ab", vars) {
		t.Error("literal text must match whole and exactly")
	}
	got, err := Expand(`-H 'if-none-match: <etag>' <a>`, vars)
	if err != nil || got != `-H 'if-none-match: "a.0"' 1` {
		t.Errorf("Expand: %q %v", got, err)
	}
	if _, err := Expand(`<unset>`, vars); err == nil {
		t.Error("Expand of an unset placeholder")
	}
	if n := NormalizeSpace("{\n  \"a\": 1\n}\x1e{ }\n"); n != `{ "a": 1 } { }` {
		t.Errorf("NormalizeSpace: %q", n)
	}
}

// renderText prints what grpcurl -format text printed for an Event of the
// fanout example, run against dev with grpcurl itself:
//
//	id: "1"
//	text: "hello"
//	32767: "\001\002\000\002"
func TestRenderText(t *testing.T) {
	m := structpb.NewStringValue("hello").ProtoReflect() // a string field, number 3
	m.SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 32767, protowire.BytesType), []byte{1, 2, 0, 2}))
	if got, want := renderText(m), "string_value: \"hello\"\n32767: \"\\001\\002\\000\\002\""; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	w := wrapperspb.Bytes([]byte("a\"\\\n\x7f\t'")).ProtoReflect()
	w.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 300))
	if got, want := renderText(w), `value: "a\"\\\n\177\t'"`+"\n9: 300"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	s, _ := structpb.NewStruct(map[string]any{"b": true})
	if got := NormalizeSpace(renderText(s.ProtoReflect())); got != `fields: < key: "b" value: < bool_value: true > >` {
		t.Errorf("nested: %s", got)
	}
}

func TestParseGrpcurl(t *testing.T) {
	words, _ := ShellWords(`grpcurl -plaintext -proto proto/example/fanout.proto -format=text --max-time 2.5 -H 'Last-Message-Id: AQ==' -d '' 127.0.0.1:8080 example.Fanout/Subscribe`)
	g, err := parseGrpcurl(words)
	if err != nil || g.format != "text" || g.maxTime != 2500*time.Millisecond || !g.hasData || g.data != "" ||
		g.headers[0] != [2]string{"last-message-id", "AQ=="} || g.addr != "127.0.0.1:8080" || g.service != "example.Fanout" || g.method != "Subscribe" {
		t.Fatalf("%+v %v", g, err)
	}
	for _, bad := range []string{
		`grpcurl -proto a.proto h:1 s.S/M`,             // no -plaintext
		`grpcurl -plaintext h:1 s.S/M`,                 // no -proto
		`grpcurl -plaintext -proto a.proto h:1`,        // no method
		`grpcurl -plaintext -proto a.proto -v h:1 s/M`, // unsupported flag
		`grpcurl -plaintext -proto a.proto -format xml h:1 s.S/M`,
	} {
		words, _ := ShellWords(bad)
		if _, err := parseGrpcurl(words); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestPrintfBase64(t *testing.T) {
	b, err := Printf(`\001\002\000\002`)
	if err != nil || string(b) != "\x01\x02\x00\x02" || base64Lines(b) != "AQIAAg==\n" {
		t.Fatalf("%q %v", b, err)
	}
	if b, err := Printf(`\"a\\\0123%%\n`); err != nil || string(b) != "\"a\\\n3%\n" {
		t.Errorf("%q %v", b, err)
	}
	for _, bad := range []string{`%s`, `\q`} {
		if _, err := Printf(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if s := base64Lines(make([]byte, 60)); len(strings.Split(s, "\n")) != 3 {
		t.Errorf("base64 wraps at 76: %q", s)
	}
}

func TestKcat(t *testing.T) {
	words, _ := ShellWords(`kcat -P -b 127.0.0.1:9092 -t prices -k ACME -H content-type=application/json`)
	k, err := parseKcat(words)
	if err != nil || !k.produce || *k.key != "ACME" || k.headers[0] != [2]string{"content-type", "application/json"} {
		t.Fatalf("%+v %v", k, err)
	}
	for _, bad := range []string{`kcat -b h -t t`, `kcat -C -b h -t t`, `kcat -C -e -b h`, `kcat -C -e -b h -t t -k x`, `kcat -P -b h -t t -X a=b`, `kcat -C -e -b h -t t -o end`} {
		words, _ := ShellWords(bad)
		if _, err := parseKcat(words); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
	topic := "events"
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: 7}, Key: []byte("k"), Value: []byte("v"),
		Headers: []kafka.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}}
	if got := kcatFormat(`%t/%p/%o %k | %h | %s (%S,%K) %%\n`, m); got != "events/0/7 k | a=1,b=2 | v (1,1) %\n" {
		t.Errorf("kcatFormat: %q", got)
	}
}

func TestHTTPCompare(t *testing.T) {
	res := httpResult{status: "HTTP/1.1 200 OK", body: "{\"a\":1}\n", header: map[string][]string{
		"Content-Type": {"application/json"}, "Etag": {`"x.0"`}, "Vary": {"a", "b"}, "Date": {"today"},
	}}
	vars := Vars{}
	if ok, d := res.compare("HTTP/1.1 200 OK\ncontent-type: application/json\netag: <etag>\nvary: b\n\n{\"a\":1}\n", true, vars); !ok || vars["etag"] != `"x.0"` {
		t.Fatalf("%v %s %v", ok, d, vars)
	}
	for name, want := range map[string]string{
		"status":          "HTTP/1.1 201 Created\n\n{\"a\":1}",
		"missing header":  "HTTP/1.1 200 OK\nlocation: /x\n\n{\"a\":1}",
		"header value":    "HTTP/1.1 200 OK\ncontent-type: text/plain\n\n{\"a\":1}",
		"bound etag":      "HTTP/1.1 200 OK\netag: <other>\netag: <etag>x\n\n{\"a\":1}",
		"body":            "HTTP/1.1 200 OK\n\n{\"a\":2}",
		"body not shown":  "HTTP/1.1 200 OK",
		"no colon header": "HTTP/1.1 200 OK\nbroken\n\n{\"a\":1}",
	} {
		if ok, _ := res.compare(want, true, Vars{"etag": `"x.0"`}); ok {
			t.Errorf("%s: matched", name)
		}
	}
	if ok, d := res.compare("{\"a\":1}", false, Vars{}); !ok {
		t.Errorf("without -i, the body alone: %s", d)
	}
}

// A -proto file is the service's when it has the path the generated package
// registered, or, for a package from another module, when it declares the
// package, the service and the method; a file declaring another package is
// not.
func TestGrpcurlProtoDeclaresTheService(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("health.proto", "syntax = \"proto3\";\npackage grpc.health.v1;\nservice Health {\n  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);\n}\n")
	write("other.proto", "syntax = \"proto3\";\npackage other.v1;\nservice Health {\n  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);\n}\n")
	g := grpcurlCmd{service: "grpc.health.v1.Health", method: "Check", protos: []string{"health.proto"}}
	if md, err := g.methodDescriptor(root); err != nil || md.FullName() != "grpc.health.v1.Health.Check" {
		t.Fatalf("the declaring file: %v, %v", md, err)
	}
	g.protos = []string{"other.proto"}
	if _, err := g.methodDescriptor(root); err == nil || !strings.Contains(err.Error(), "which no -proto names") {
		t.Fatalf("a file of another package: %v, want refused", err)
	}
	g.method, g.protos = "Watch", []string{"health.proto"}
	if _, err := g.methodDescriptor(root); err == nil {
		t.Fatal("a method the file does not declare: accepted")
	}
}
