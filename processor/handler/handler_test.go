package handler

import (
	"encoding/json"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

func TestProblemResponse(t *testing.T) {
	r := ProblemResponse(404, "no route matches GET /x", route.Header{Name: "x-a", Value: "1"})
	if r.Status != 404 || len(r.Headers) != 2 || r.Headers[0] != (route.Header{Name: "content-type", Value: "application/problem+json"}) || r.Headers[1].Name != "x-a" {
		t.Fatalf("%+v", r)
	}
	var p map[string]any
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	if p["type"] != "about:blank" || p["title"] != "Not Found" || p["status"] != float64(404) || p["detail"] != "no route matches GET /x" {
		t.Fatalf("%v", p)
	}
	r = TypedProblemResponse(Problem{Status: 409, Type: "https://example.com/conflict"})
	p = nil
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	if p["title"] != "Conflict" || p["type"] != "https://example.com/conflict" {
		t.Fatalf("%v", p)
	}
	if _, ok := p["detail"]; ok {
		t.Fatal("empty detail should be omitted")
	}
}
