package e2e_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/testpki"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// secureConfig routes a fetch, a produce with reply, and a gRPC stream (and
// the produce that feeds it) through one kafka binding whose options are
// filled in per test: %s is the YAML map of security properties.
const secureConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: %s
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: PUT, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: items, key: "${params.id}" }
      - when: [{ method: POST, path: "/orders/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: orders-requests, key: "${params.id}", reply-to: orders-responses }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: example.Fanout/Publish }]
        exit: kafka0
        with: { capability: produce, topic: fanout, key: "${idempotencyKey}" }
      - when: [{ service: example.Fanout }]
        exit: kafka0
        with: { capability: fetch, topic: fanout }
limits: { kafka-timeout: 3s }
`

// pki is one throw-away PKI: the broker's CA and certificate, a client
// certificate, and a CA the broker does not use, as files.
type pki struct {
	server                tls.Certificate
	ca                    *testpki.CA
	caFile                string
	otherCAFile           string
	clientCert, clientKey string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA("kafka-ext-proc test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewCA("some other CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("broker")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ca.Client("kafka-ext-proc")
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{server: srv.TLS, ca: ca}
	if p.caFile, err = ca.Write(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if p.otherCAFile, err = other.Write(dir, "other-ca"); err != nil {
		t.Fatal(err)
	}
	if p.clientCert, p.clientKey, err = cl.Write(dir, "client"); err != nil {
		t.Fatal(err)
	}
	return p
}

// serverTLS is the broker's TLS; mtls requires client certificates signed by
// the CA.
func (p *pki) serverTLS(mtls bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
	if mtls {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.ca.Pool()
	}
	return c
}

// secureCase is one way of securing the broker and the matching client
// properties.
type secureCase struct {
	name  string
	tls   bool
	mtls  bool
	users []embedded.User
	props map[string]string
}

func secureCases(p *pki) []secureCase {
	mtlsProps := map[string]string{
		"ssl.ca.location": p.caFile, "ssl.certificate.location": p.clientCert, "ssl.key.location": p.clientKey,
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	return []secureCase{
		{name: "mTLS", tls: true, mtls: true, props: with(mtlsProps, "security.protocol", "SSL")},
		{name: "SASL PLAIN", users: []embedded.User{{Mechanism: "PLAIN", Name: "gw", Password: "plain-secret"}},
			props: with(nil, "security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "PLAIN", "sasl.username", "gw", "sasl.password", "plain-secret")},
		{name: "TLS+SCRAM-SHA-256", tls: true, users: []embedded.User{{Mechanism: "SCRAM-SHA-256", Name: "gw", Password: "scram-256-secret"}},
			props: with(nil, "security.protocol", "SASL_SSL", "ssl.ca.location", p.caFile,
				"sasl.mechanism", "SCRAM-SHA-256", "sasl.username", "gw", "sasl.password", "scram-256-secret")},
		{name: "mTLS+SCRAM-SHA-512", tls: true, mtls: true, users: []embedded.User{{Mechanism: "SCRAM-SHA-512", Name: "gw", Password: "scram-512-secret"}},
			props: with(mtlsProps, "security.protocol", "SASL_SSL",
				"sasl.mechanism", "SCRAM-SHA-512", "sasl.username", "gw", "sasl.password", "scram-512-secret")},
	}
}

// yamlMap renders properties as a YAML flow map.
// bootstrap.servers is required; dev points it at the embedded broker.
func yamlMap(props map[string]string) string {
	all := map[string]string{"bootstrap.servers": "localhost:9092"}
	for k, v := range props {
		all[k] = v
	}
	b, _ := json.Marshal(all)
	return string(b)
}

// secureBroker configures the dev stack's broker for a case.
func secureBroker(p *pki, c secureCase) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		if c.tls {
			o.BrokerOptions.TLS = p.serverTLS(c.mtls)
		}
		o.BrokerOptions.Users = c.users
		o.BrokerOptions.Topics = append(o.BrokerOptions.Topics, embedded.Topic{Name: "fanout", Partitions: 1})
	}
}

// A fetch, a produce with reply and a gRPC stream work through
// every secured broker: TLS with client certificates, SASL PLAIN, and TLS
// with SCRAM-SHA-256 and SCRAM-SHA-512.
func TestSecureKafkaEndToEnd(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	for _, c := range secureCases(p) {
		t.Run(c.name, func(t *testing.T) {
			e := startEnv(t, fmt.Sprintf(secureConfig, yamlMap(c.props)), secureBroker(p, c),
				withResponders(responder.Options{Topic: "orders-requests", ReplyTo: "orders-responses", Handler: responder.HTTPEcho(), Properties: c.props}))

			// Produce, then fetch what was produced.
			if resp, body := e.request(e.h1, "PUT", "/items/7", `{"name":"pen"}`, "content-type", "application/json"); resp.StatusCode/100 != 2 {
				t.Fatalf("PUT /items/7: %d %s", resp.StatusCode, body)
			}
			resp, body := e.request(e.h1, "GET", "/items/7", "", "prefer", "wait=10")
			if resp.StatusCode != 200 || body != `{"name":"pen"}` {
				t.Fatalf("GET /items/7: %d %q", resp.StatusCode, body)
			}

			// Produce with reply: the responder answers over the same
			// secured cluster (the echo answers 201 with the request it read).
			resp, body = e.request(e.h1, "POST", "/orders/1", `{"qty":2}`, "content-type", "application/json")
			if resp.StatusCode != 201 || !strings.Contains(body, `"path":"/orders/1","key":"1","body":{"qty":2}`) {
				t.Fatalf("POST /orders/1: %d %q", resp.StatusCode, body)
			}

			// A gRPC stream: a published event reaches the subscriber.
			ctx := ctxFor(t, 30*time.Second)
			client := example.NewFanoutClient(e.grpcConn())
			if _, err := client.Publish(ctx, &example.Event{Id: "1", Text: "secured"}); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			st, err := client.Subscribe(ctx, &emptypb.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := st.Recv()
			if err != nil || ev.GetText() != "secured" {
				t.Fatalf("Subscribe: %v, %v", ev, err)
			}
		})
	}
}

// syncLog collects the stack's log lines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Wrong credentials and a broker certificate from an untrusted
// CA each give a named startup error in the log and a failing /readyz whose
// reason names the cause.
func TestSecureKafkaRefusedAtStartup(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	scram := []embedded.User{{Mechanism: "SCRAM-SHA-256", Name: "gw", Password: "right"}}
	for _, c := range []struct {
		name  string
		users []embedded.User
		props map[string]string
		cause string
	}{
		{"wrong password", scram, map[string]string{"security.protocol": "SASL_SSL", "ssl.ca.location": p.caFile,
			"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "gw", "sasl.password": "wrong"}, "kafka authentication failed"},
		{"untrusted CA", scram, map[string]string{"security.protocol": "SASL_SSL", "ssl.ca.location": p.otherCAFile,
			"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "gw", "sasl.password": "right"}, "kafka TLS handshake failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncLog
			cfg := fmt.Sprintf(secureConfig, yamlMap(c.props))
			d := startSecureDev(t, cfg, func(o *stack.DevOptions) {
				o.BrokerOptions.TLS = p.serverTLS(false)
				o.BrokerOptions.Users = c.users
				o.Admin = "127.0.0.1:0"
				o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			want := `kafka kafka0 connection: kafka binding \"kafka0\": ` + c.cause
			deadline := time.Now().Add(30 * time.Second)
			for {
				code, body := getReadyz(t, d.Processor.AdminAddr())
				if code == http.StatusServiceUnavailable && strings.Contains(body, want) &&
					strings.Contains(logs.String(), "level=ERROR") && strings.Contains(logs.String(), `cause="`+c.cause+`"`) {
					t.Logf("/readyz: %s", body)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/readyz %d %s\nwant the reason %q and a logged error; logs:\n%s", code, body, want, logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// startSecureDev starts a dev stack without waiting for it to be ready.
func startSecureDev(t *testing.T, cfgYAML string, opt func(*stack.DevOptions)) *stack.Dev {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(cfgYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	do := stack.DevOptions{Config: cfg, Envoy: envoy.DefaultYAML(), Front: "127.0.0.1:0", Listen: "127.0.0.1:0", Kafka: "127.0.0.1:0"}
	opt(&do)
	d, err := stack.StartDev(do)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func getReadyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
