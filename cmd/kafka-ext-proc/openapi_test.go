package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestOpenAPICommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"openapi", "--config", "demo.yaml", "--format", "json", "--server", "http://localhost:8080"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc struct {
		OpenAPI string                     `json:"openapi"`
		Servers []struct{ URL string }     `json:"servers"`
		Paths   map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Paths["/orders/{id};cid={correlationId}"] == nil || len(doc.Servers) != 1 {
		t.Errorf("document: openapi %q, servers %v, paths %d", doc.OpenAPI, doc.Servers, len(doc.Paths))
	}

	out.Reset()
	if code := run(context.Background(), []string{"openapi", "--config", "demo.yaml"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "openapi: 3.1.0\n") {
		t.Errorf("YAML output starts %q", out.String()[:min(40, out.Len())])
	}
}

func TestOpenAPICommandErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"openapi"}, 2, "--config is required"},
		{[]string{"openapi", "--config", "demo.yaml", "--format", "xml"}, 2, `--format "xml"`},
		{[]string{"openapi", "--config", "demo.yaml", "--binding", "grpc0"}, 1, `no http-kafka or sse-kafka binding "grpc0"`},
		{[]string{"openapi", "--config", "missing.yaml"}, 1, "missing.yaml"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), c.args, &out, &errOut)
		if code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut.String(), c.code, c.want)
		}
	}
}
