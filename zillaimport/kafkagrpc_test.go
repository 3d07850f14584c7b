package zillaimport

import (
	"bytes"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// kafkaGRPCSource is a kafka-grpc binding in Zilla's shape over a TLS
// chain, with every option Zilla's schema gives the binding; its :scheme
// and :authority differ from what the chain does.
const kafkaGRPCSource = `bindings:
  cache:
    type: kafka
    kind: cache_client
    exit: brokers
  brokers: { type: kafka, kind: client, options: { servers: ["k:9092"] } }
  remote:
    type: kafka-grpc
    kind: remote_server
    entry: cache
    options:
      acks: none
      idempotency: { metadata: x-call-key }
      correlation:
        headers: { service: app:service, method: app:method, correlation-id: app:cid, reply-to: app:reply-to }
    routes:
      - exit: svc_grpc
        when:
          - { topic: orders-requests, reply-to: orders-responses, method: shop.Orders/Place }
          - { topic: echo-requests, reply-to: echo-responses, method: shop.Echo/* }
        with: { scheme: http, authority: "front.example:443" }
  svc_grpc:
    type: grpc
    kind: client
    routes:
      - exit: svc_http
        when: [{ method: shop.Orders/* }]
  svc_http: { type: http, kind: client, options: { versions: [h2] }, exit: svc_tls }
  svc_tls:
    type: tls
    kind: client
    options: { trustcacerts: true, sni: [orders.internal], alpn: [h2] }
    exit: svc_tcp
  svc_tcp: { type: tcp, kind: client, options: { host: orders.internal, port: 8443 } }
`

// A kafka-grpc binding and its grpc → http → tls → tcp chain become our
// kafka-grpc binding: the routes read through the kafka client the entry
// leads to and dial the tcp client's address over TLS; the correlation
// headers and acks are kept, and what changes is said in comments.
func TestKafkaGRPCImported(t *testing.T) {
	res, err := Import("zilla.yaml", []byte(kafkaGRPCSource))
	if err != nil {
		t.Fatal(err)
	}
	cfg := load(t, res)
	if len(cfg.KafkaGRPC) != 1 {
		t.Fatalf("kafka-grpc bindings: %d, want 1\n%s", len(cfg.KafkaGRPC), res.Config)
	}
	b := cfg.KafkaGRPC[0]
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("name", b.Name, "remote")
	check("acks", b.Acks, config.AcksNone)
	check("correlation", b.Correlation, config.CorrelationHeaders{ReplyTo: "app:reply-to", CorrelationID: "app:cid",
		Service: "app:service", Method: "app:method", Status: "zilla:status", Message: "zilla:message"})
	if len(b.Routes) != 1 || len(b.Routes[0].When) != 2 {
		t.Fatalf("routes: %+v", b.Routes)
	}
	r := b.Routes[0]
	check("exit (through the cache client)", r.Exit, "brokers")
	check("when[0]", r.When[0].Topic+" "+r.When[0].ReplyTo+" "+r.When[0].Method, "orders-requests orders-responses shop.Orders/Place")
	check("when[1]", r.When[1].Topic+" "+r.When[1].ReplyTo+" "+r.When[1].Method, "echo-requests echo-responses shop.Echo/*")
	check("scheme (the tls client)", r.Scheme, "https")
	check("TLS configured", r.TLS != nil, true)
	check("authority (the tcp client)", r.Authority, "orders.internal:8443")
	for _, comment := range []string{
		"# Zilla's scheme http was only the :scheme it sent; here the scheme says whether to use TLS, and the chain has tls client svc_tls",
		"# Zilla's authority front.example:443 was only the :authority it sent",
		"# tls client svc_tls: sni [orders.internal] dropped",
		"# from tcp client svc_tcp (line 34): the worker dials it itself (grpc client svc_grpc and the clients after it dropped)",
		"line 13: binding remote: options.idempotency.metadata (x-call-key) dropped",
	} {
		if !bytes.Contains(res.Config, []byte(comment)) {
			t.Errorf("no comment %q in the output:\n%s", comment, res.Config)
		}
	}
	if bytes.Contains(res.Config, []byte("\n  svc_")) || bytes.Contains(res.Envoy, []byte("svc_")) {
		t.Errorf("a client of the chain is in the output:\n%s\n%s", res.Config, res.Envoy)
	}
}
