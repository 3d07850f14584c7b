package openapi

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

const modelsYAML = `
catalogs:
  inline0:
    type: inline
    options:
      subjects:
        item: { schema: '{"type":"object","required":["name"],"properties":{"name":{"type":"string"}},"additionalProperties":false}' }
bindings:
  kafka0:
    type: kafka
    kind: client
    options:
      bootstrap.servers: k:9092
      topics:
        - name: items
          value: { model: json, catalog: { inline0: [{ subject: item }] } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: PUT, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: items, key: "${params.id}" }
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: /items }]
        exit: kafka0
        with: { capability: fetch, topic: items, merge: { content-type: application/json } }
`

// TestTopicModelSchemas: a topic's JSON Schema is the request body's and
// the answers' schema, and the model's answers are listed; a validator
// reading the document refuses a body the processor would refuse.
func TestTopicModelSchemas(t *testing.T) {
	cfg, err := config.Parse("models.yaml", []byte(modelsYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	doc, js := generate(t, cfg, Options{Servers: []string{"http://localhost:8080"}})
	v := validate(t, js)
	put := doc.Paths["/items/{id}"].Put
	if put.RequestBody.Content["application/json"] == nil {
		t.Fatalf("PUT body: %+v, want the schema under application/json", put.RequestBody.Content)
	}
	for _, code := range []string{"415", "422", "503"} {
		if put.Responses[code] == nil {
			t.Errorf("PUT: no %s answer", code)
		}
	}
	if get := doc.Paths["/items/{id}"].Get.Responses["200"]; get.Content["application/json"] == nil || get.Content["application/json"].Schema.Raw == nil {
		t.Errorf("GET one: %+v, want the schema", get.Content)
	}
	if all := doc.Paths["/items"].Get.Responses["200"].Content["application/json"]; all == nil || all.Schema.Items == nil || all.Schema.Items.Raw == nil {
		t.Errorf("GET all: want an array of the schema")
	}
	for body, want := range map[string]bool{`{"name":"pen"}`: true, `{"qty":1}`: false} {
		req, _ := http.NewRequest(http.MethodPut, "http://localhost:8080/items/1", bytes.NewReader([]byte(body)))
		req.Header.Set("content-type", "application/json")
		if ok, errs := v.ValidateHttpRequest(req); ok != want {
			t.Errorf("body %s: the document's validator says %v (%v), want %v", body, ok, errs, want)
		}
	}
}
