package httpkafka

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// These tests cover the pure parts of produce: record headers, the
// correlation id, reply sanitization. The Kafka side is tested end to end
// (e2e/produce_test.go).

// cid computes the correlation id of a request as produce does.
func cid(idem string, key string, hs route.Headers, ids map[string]route.Identity, overrides []client.Header, body string) (string, []client.Header) {
	c := newCorrelation()
	c.field([]byte(key))
	out := requestHeaders(c, hs, ids, "gateway:reply-to", "replies", "gateway:correlation-id", "gateway:fingerprint", overrides)
	c.field([]byte(body))
	return c.id(idem, ids), out
}

var cidRe = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}-[0-9a-f]{32}$`)

func TestCorrelationID(t *testing.T) {
	base := route.Headers{
		{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/orders/1"}, {Name: ":authority", Value: "api.example.com"},
		{Name: "content-type", Value: "application/json"}, {Name: "user-agent", Value: "curl/8"},
		{Name: "x-request-id", Value: "r1"}, {Name: "x-forwarded-for", Value: "10.0.0.1"}, {Name: "traceparent", Value: "00-a-b-01"},
	}
	alice := map[string]route.Identity{"jwt0": {Subject: "alice"}}
	bob := map[string]route.Identity{"jwt0": {Subject: "bob"}}
	id, _ := cid("k1", "1", base, alice, nil, `{"qty":1}`)
	if !cidRe.MatchString(id) || !strings.HasPrefix(id, "k1-") {
		t.Fatalf("correlation id %q is not <idempotency key>-<32 hex>", id)
	}
	if again, _ := cid("k1", "1", base, alice, nil, `{"qty":1}`); again != id {
		t.Errorf("the same request gave %q then %q", id, again)
	}

	volatile := append(route.Headers(nil), base...)
	for i := range volatile {
		switch volatile[i].Name {
		case "user-agent", "x-request-id", "x-forwarded-for", "traceparent":
			volatile[i].Value += "-other"
		}
	}
	volatile = append(volatile, route.Header{Name: "x-b3-traceid", Value: "t"}, route.Header{Name: "tracestate", Value: "s"},
		route.Header{Name: "x-datadog-trace-id", Value: "1"}, route.Header{Name: "x-amzn-trace-id", Value: "Root=1"},
		route.Header{Name: "sw8", Value: "1-a"}, route.Header{Name: "uber-trace-id", Value: "a:b:0:1"})
	if got, _ := cid("k1", "1", volatile, alice, nil, `{"qty":1}`); got != id {
		t.Errorf("volatile headers changed the id: %q vs %q", got, id)
	}

	differs := map[string]string{}
	differs["body"], _ = cid("k1", "1", base, alice, nil, `{"qty":2}`)
	differs["key"], _ = cid("k1", "2", base, alice, nil, `{"qty":1}`)
	differs["identity"], _ = cid("k1", "1", base, bob, nil, `{"qty":1}`)
	differs["no identity"], _ = cid("k1", "1", base, nil, nil, `{"qty":1}`)
	differs["override"], _ = cid("k1", "1", base, alice, []client.Header{{Key: "x-o", Value: []byte("v")}}, `{"qty":1}`)
	differs["authority"], _ = cid("k1", "1", append(append(route.Headers(nil), base...), route.Header{Name: ":authority", Value: "other"}), alice, nil, `{"qty":1}`)
	// Field boundaries cannot shift: key "1" + body "x" vs key "1x" + body "".
	a, _ := cid("k1", "1", nil, nil, nil, "x")
	b, _ := cid("k1", "1x", nil, nil, nil, "")
	if a == b {
		t.Error("moving bytes from the body to the key kept the id")
	}
	for what, got := range differs {
		if got == id {
			t.Errorf("a different %s gave the same id", what)
		}
	}

	// The identity half binds follow-ups to the caller.
	if !followUpAllowed(id, alice) {
		t.Error("the original caller may not follow up")
	}
	if followUpAllowed(id, bob) || followUpAllowed(id, nil) {
		t.Error("another caller may follow up")
	}
	anon, _ := cid("k1", "1", base, nil, nil, "")
	if !followUpAllowed(anon, nil) || followUpAllowed(anon, alice) {
		t.Error("unguarded ids: follow-up binding is wrong")
	}
	for _, bad := range []string{"", "k1", "-" + id[3:], id[:len(id)-1], strings.ToUpper(id), "k 1" + id[2:], id + "0"} {
		if followUpAllowed(bad, alice) {
			t.Errorf("malformed id %q accepted", bad)
		}
	}
}

// The same request must get the same id from every version, so a replay
// reaching a replica that runs another version is still recognised.
func TestCorrelationIDIsStable(t *testing.T) {
	hs := route.Headers{{Name: ":method", Value: "POST"}, {Name: "content-type", Value: "application/json"},
		{Name: "x-request-id", Value: "r"}, {Name: "if-match", Value: `"a.0.1/v7", "b"`}}
	overrides := []client.Header{{Key: "tenant", Value: []byte("acme")}}
	for _, tc := range []struct {
		ids  map[string]route.Identity
		want string
	}{
		{nil, "k1-eec6878027a8e4282bd9d255cf046202"},
		{map[string]route.Identity{}, "k1-eec6878027a8e4282bd9d255cf046202"}, // the precomputed anonymous tag, as nil
		{map[string]route.Identity{"jwt0": {Subject: "alice"}}, "k1-431fe62f820682a1bd85b3b607825e24"},
		{map[string]route.Identity{"b": {Subject: "x"}, "a": {Subject: "y"}, "c": {}}, "k1-986407a2d82c3fe37c852a330e9d3b58"},
	} {
		if got, _ := cid("k1", "42", hs, tc.ids, overrides, `{"qty":1}`); got != tc.want {
			t.Errorf("identities %v: %s, want %s", tc.ids, got, tc.want)
		}
		if !followUpAllowed(tc.want, tc.ids) {
			t.Errorf("identities %v: follow-up of %s refused", tc.ids, tc.want)
		}
	}
}

func TestRequestRecordHeaders(t *testing.T) {
	in := route.Headers{
		{Name: ":method", Value: "PUT"}, {Name: ":path", Value: "/items/1?x=1"},
		{Name: "content-type", Value: "application/json"}, {Name: "content-length", Value: "9"},
		{Name: "prefer", Value: "respond-async"}, {Name: "authorization", Value: "Bearer t"},
		{Name: "cookie", Value: "c=1"}, {Name: "proxy-authorization", Value: "p"},
		{Name: "connection", Value: "close"}, {Name: "te", Value: "trailers"}, {Name: "transfer-encoding", Value: "chunked"},
		{Name: "x-envoy-original-path", Value: "/x"}, {Name: "x-request-id", Value: "r"},
		{Name: "gateway:correlation-id", Value: "forged"}, {Name: "x-o", Value: "forged"}, {Name: "gateway:fingerprint", Value: "forged.forged"},
		{Name: "if-match", Value: `"HsYV1vQBNyg.0.7/revision=42"`}, {Name: "idempotency-key", Value: "k1"},
	}
	_, out := cid("k1", "1", in, nil, []client.Header{{Key: "x-o", Value: []byte("override")}}, "")
	var got []string
	for _, h := range out {
		got = append(got, h.Key+"="+string(h.Value))
	}
	want := []string{":method=PUT", ":path=/items/1?x=1", "content-type=application/json", "x-request-id=r",
		"if-match=revision=42", "idempotency-key=k1", "gateway:reply-to=replies", "x-o=override"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("record headers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestIfMatchForward(t *testing.T) {
	for in, want := range map[string]string{
		`"t.0.1/rev=1"`:                 "rev=1",
		`W/"t.0.1/rev=1"`:               "rev=1",
		`t.0.1/rev=1`:                   "rev=1",
		`"t.0.1/a", "t.m.0:1", "t/b"`:   "a, b",
		`"t.0.1"`:                       "",
		`*`:                             "",
		`"t.0.1/"`:                      "",
		`"t.m8.0:1,1:2/x"`:              "x",
		`"t.0.1/rev=1", "t.0.2/rev=2" `: "rev=1, rev=2",
	} {
		got, ok := ifMatchForward(in)
		if got != want || ok != (want != "") {
			t.Errorf("ifMatchForward(%s) = %q %v, want %q", in, got, ok, want)
		}
	}
}

func TestReplySanitized(t *testing.T) {
	rec := &client.Record{Value: []byte("body"), Headers: []client.Header{
		{Key: ":status", Value: []byte("201")},
		{Key: ":path", Value: []byte("/evil")},
		{Key: "transfer-encoding", Value: []byte("chunked")},
		{Key: "content-length", Value: []byte("1")},
		{Key: "Connection", Value: []byte("close")},
		{Key: "x-split", Value: []byte("a\r\nset-cookie: evil=1")},
		{Key: "x-nul", Value: []byte("a\x00b")},
		{Key: "gateway:correlation-id", Value: []byte("c")},
		{Key: "gateway:status", Value: []byte("0")},
		{Key: "x-cid", Value: []byte("c")},
		{Key: "bad name", Value: []byte("v")},
		{Key: "Location", Value: []byte("/items/1")},
		{Key: "content-type", Value: []byte("application/json")},
		{Key: "x-tab", Value: []byte("a\tb")},
		{Key: ":status", Value: []byte("500")}, // only the first counts
	}}
	r := replyResponse(rec, "x-cid")
	var got []string
	for _, h := range r.Headers {
		got = append(got, h.Name+"="+h.Value)
	}
	want := "location=/items/1\ncontent-type=application/json\nx-tab=a\tb"
	if r.Status != 201 || string(r.Body) != "body" || strings.Join(got, "\n") != want {
		t.Errorf("reply: %d %q\n%s\nwant 201 \"body\"\n%s", r.Status, r.Body, strings.Join(got, "\n"), want)
	}

	for status, want := range map[string]int{"": 200, "200": 200, "404": 404, "599": 599, "99": 502, "100": 502, "600": 502, "2OO": 502, " 200": 502} {
		rec := &client.Record{Value: []byte("x")}
		if status != "" {
			rec.Headers = []client.Header{{Key: ":status", Value: []byte(status)}}
		}
		r := replyResponse(rec)
		if r.Status != want {
			t.Errorf(":status %q → %d, want %d", status, r.Status, want)
		}
		if want == http.StatusBadGateway && !strings.Contains(string(r.Body), "status") {
			t.Errorf(":status %q: the 502 does not say why: %s", status, r.Body)
		}
	}
	if r := replyResponse(&client.Record{Value: []byte("x"), Headers: []client.Header{{Key: ":status", Value: []byte("204")}}}); r.Status != 204 || r.Body != nil {
		t.Errorf("204 reply: %d %q, want no body", r.Status, r.Body)
	}
}
