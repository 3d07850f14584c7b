package config

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compileSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Validate the schema against its meta-schema too; formats are asserted.
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// validateYAML validates YAML text against the schema; YAML that cannot be
// turned into JSON (syntax errors, duplicate keys, broken aliases) fails too.
func validateYAML(sch *jsonschema.Schema, data []byte) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// TestSchemaFileIsGenerated: schema.json, the file editors are pointed at,
// is the schema built from the definition in shape.go.
func TestSchemaFileIsGenerated(t *testing.T) {
	file, err := os.ReadFile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, Schema()) {
		t.Fatal("schema.json differs from the schema shape.go defines: run go generate ./processor/config and commit it")
	}
}

// TestSchemaAcceptsValidConfigs: every file the loader accepts under
// testdata/valid is accepted by the schema.
func TestSchemaAcceptsValidConfigs(t *testing.T) {
	sch := compileSchema(t)
	files, err := filepath.Glob(filepath.Join("testdata", "valid", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no valid configs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Parse(f, data, testEnv); err != nil {
				t.Errorf("loader: %v", err)
			}
			if err := validateYAML(sch, data); err != nil {
				t.Errorf("schema: %v", err)
			}
		})
	}
}

// loaderOnlyRules are the rule cases a JSON Schema cannot express: they
// relate values to each other, to the environment or to files. Every other
// rule case must be rejected by the schema as well as by the loader.
var loaderOnlyRules = []string{
	// YAML features the JSON view of the file hides.
	"two documents", "merge key", "unsupported tag",
	// References between parts of the file.
	"exit names no binding", "exit names a proxy binding", "undefined guard",
	"param not in every path", "param in a condition without path", "param without when",
	"guard identity of undefined guard", "guard identity of unlisted guard",
	"grpc service contradicts method", "path duplicate parameter",
	// The environment and the file system.
	"unset environment variable", "missing file reference", "missing keys-file", "keys string not a JWKS",
	// Arithmetic and grammars beyond a regular expression.
	"bad topic-pattern", "fractional bytes", "message.max.bytes below the limits",
	// Schemas compiled, catalogs looked up, strategies checked against globs.
	"inline schema that does not compile", "topic model names an unknown catalog", "strategy topic on a glob",
	"view on a primitive", "schema model without catalog", "avro model on a grpc topic", "avro model on a grpc reply topic",
}

func TestSchemaRejectsInvalidConfigs(t *testing.T) {
	sch := compileSchema(t)
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.want) == 0 {
				t.Fatal("rule case without errors")
			}
			err := validateYAML(sch, []byte(tc.yaml))
			loaderOnly := slices.Contains(loaderOnlyRules, tc.name)
			if err == nil && !loaderOnly {
				t.Errorf("schema accepts it; the loader says %s", tc.want[0])
			}
			if err != nil && loaderOnly {
				t.Errorf("schema rejects it, remove it from loaderOnlyRules: %v", err)
			}
		})
	}
}

// TestInvalidFiles: each file under testdata/invalid fails to load with
// exactly the errors of its .errors file, and the schema rejects it too.
func TestInvalidFiles(t *testing.T) {
	sch := compileSchema(t)
	files, err := filepath.Glob(filepath.Join("testdata", "invalid", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid configs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(f, data, testEnv)
			if err == nil {
				t.Fatal("loader accepts it")
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".errors"
			if *update {
				if err := os.WriteFile(golden, []byte(err.Error()+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, rerr := os.ReadFile(golden)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if got := err.Error() + "\n"; got != string(want) {
				t.Errorf("errors:\n%s\nwant (%s; go test -update rewrites it):\n%s", got, golden, want)
			}
			if validateYAML(sch, data) == nil {
				t.Error("schema accepts it")
			}
		})
	}
}
