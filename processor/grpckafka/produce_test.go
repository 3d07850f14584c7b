package grpckafka

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// The digest is Zilla's (the reference implementation: md5 over the service,
// method and reply-to header names and values, then the override values, no
// separators), and this vector is the one of Zilla's own unary produce test
// script, when no guard is involved: a Zilla responder sees the same ids.
func TestCorrelationIDMatchesTheReference(t *testing.T) {
	names := config.CorrelationHeaders{Service: "zilla:service", Method: "zilla:method", ReplyTo: "zilla:reply-to", CorrelationID: "zilla:correlation-id"}
	got := correlationID("59410e57-3e0f-4b61-9328-f645a7968ac8", names, "example.EchoService", "EchoUnary", "responses",
		[]client.Header{{Key: "zilla:identity", Value: []byte("test")}}, nil)
	if want := "59410e57-3e0f-4b61-9328-f645a7968ac8-479f2c3fb58bc3f04bbe15440a657670"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	// The guard identity is part of it: two callers never share a reply.
	a := correlationID("k", names, "s", "m", "r", nil, map[string]string{"g": "alice"})
	b := correlationID("k", names, "s", "m", "r", nil, map[string]string{"g": "bob"})
	c := correlationID("k", names, "s", "m", "r", nil, nil)
	if a == b || a == c {
		t.Fatalf("identities do not separate: %s %s %s", a, b, c)
	}
}

func TestIdempotencyKeys(t *testing.T) {
	for _, tc := range []struct {
		hs    route.Headers
		given bool
		bad   bool
	}{
		{nil, false, false},
		{route.Headers{{Name: "idempotency-key", Value: "a-1.b_c~"}}, true, false},
		{route.Headers{{Name: "idempotency-key", Value: "a b"}}, false, true},
		{route.Headers{{Name: "idempotency-key", Value: ""}}, false, true},
		{route.Headers{{Name: "idempotency-key", Value: string(make([]byte, 129))}}, false, true},
		{route.Headers{{Name: "idempotency-key", Value: "a"}, {Name: "idempotency-key", Value: "b"}}, false, true},
	} {
		refs := &kafkaroute.Refs{}
		given, st := idempotencyKey(refs, tc.hs, "idempotency-key")
		k := refs.IdempotencyKey
		if (st != nil) != tc.bad || given != tc.given || (st == nil && k == "") {
			t.Errorf("%v: %q %v %v", tc.hs, k, given, st)
		}
		if st != nil && st.Code != codes.InvalidArgument {
			t.Errorf("%v: %v", tc.hs, st)
		}
	}
}

func TestMetadataMapping(t *testing.T) {
	meta := requestMeta(route.Headers{
		{Name: ":path", Value: "/x.Y/Z"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: "1S"}, {Name: "user-agent", Value: "grpc-go"}, {Name: "authorization", Value: "Bearer x"},
		{Name: "x-envoy-expected-rq-timeout-ms", Value: "5"}, {Name: "custom", Value: "v"}, {Name: "trace-bin", Value: "AAE"},
		{Name: "idempotency-key", Value: "k"},
	})
	want := []string{"meta:custom=v", "meta:trace-bin=AAE", "meta:idempotency-key=k"}
	if len(meta) != len(want) {
		t.Fatalf("%v", meta)
	}
	for i, h := range meta {
		if h.Key+"="+string(h.Value) != want[i] {
			t.Fatalf("%d: %s=%s, want %s", i, h.Key, h.Value, want[i])
		}
	}
	md := metadataOf([]client.Header{
		{Key: "meta:Custom", Value: []byte("v")}, {Key: "meta:trace-bin", Value: []byte("AAE=")}, {Key: "other", Value: []byte("x")},
		{Key: "meta:grpc-status", Value: []byte("0")}, {Key: "meta:bad name", Value: []byte("x")}, {Key: "meta:nl", Value: []byte("a\nb")},
		{Key: "meta:content-type", Value: []byte("text/plain")},
	})
	if len(md) != 2 || md[0] != (route.Header{Name: "custom", Value: "v"}) || md[1] != (route.Header{Name: "trace-bin", Value: "AAE="}) {
		t.Fatalf("%v", md)
	}
}

func TestTerminalStatus(t *testing.T) {
	const statusHeader, messageHeader = "gateway:status", "gateway:message"
	for _, tc := range []struct {
		hs   []client.Header
		code codes.Code
		msg  string
	}{
		{nil, codes.OK, ""},
		{[]client.Header{{Key: statusHeader, Value: []byte("0")}}, codes.OK, ""},
		{[]client.Header{{Key: statusHeader, Value: []byte("9")}, {Key: messageHeader, Value: []byte("Custom Error Message")}}, codes.FailedPrecondition, "Custom Error Message"},
		{[]client.Header{{Key: statusHeader, Value: []byte("17")}}, codes.Unknown, ""},
		{[]client.Header{{Key: statusHeader, Value: []byte("x")}}, codes.Unknown, ""},
		{[]client.Header{{Key: "zilla:status", Value: []byte("9")}}, codes.OK, ""}, // another name: not the status
	} {
		st := terminalStatus(&client.Record{Headers: tc.hs}, statusHeader, messageHeader)
		if st.Code != tc.code || (tc.msg != "" && st.Message != tc.msg) {
			t.Errorf("%v: %v %q", tc.hs, st.Code, st.Message)
		}
	}
}

// An UNAVAILABLE or FAILED_PRECONDITION of a produce call says what a retry
// does, which depends on whether the call carried an idempotency key.
func TestProduceStatusSaysWhatARetryDoes(t *testing.T) {
	keyed := kafkaroute.RetryHint{Name: "idempotency-key metadata", Given: true}
	keyless := kafkaroute.RetryHint{Name: "idempotency-key metadata"}
	for _, c := range []struct {
		name string
		st   handler.Status
		code codes.Code
		says string
	}{
		{"unacknowledged, keyed", produceStatus(produce.ErrUnacknowledged, "t", true, keyed), codes.Unavailable,
			"a retry with the same idempotency-key metadata writes nothing already written"},
		{"unacknowledged, no key", produceStatus(produce.ErrUnacknowledged, "t", true, keyless), codes.Unavailable,
			"this request has no idempotency-key metadata, so a retry may write it a second time"},
		{"index not ready", claimStatus(context.Background(), fmt.Errorf("%w: reading back t", client.ErrNotReady), "t"), codes.Unavailable,
			"nothing was written"},
		{"expired", claimStatus(context.Background(), &kafkaroute.ExpiredError{CID: "k-1", First: time.Unix(0, 0), Window: time.Minute}, "t"),
			codes.FailedPrecondition, "expired: this request (correlation id k-1) was first written"},
	} {
		if c.st.Code != c.code || !strings.Contains(c.st.Message, c.says) {
			t.Errorf("%s: %v %q, want %v saying %q", c.name, c.st.Code, c.st.Message, c.code, c.says)
		}
	}
}

// The README's account of a gRPC correlation id: one MD5 over the service,
// method and reply-to headers' names and values, the override values and
// the identities' subjects, so the whole id changes with the method.
func TestCorrelationIDAsTheREADMESays(t *testing.T) {
	names := config.CorrelationHeaders{Service: "gateway:service", Method: "gateway:method", ReplyTo: "gateway:reply-to"}
	say := correlationID("k1", names, "example.Echo", "Say", "echo-replies", []client.Header{{Key: "x-o", Value: []byte("v")}}, map[string]string{"jwt0": "alice"})
	sum := md5.Sum([]byte("gateway:serviceexample.Echogateway:methodSaygateway:reply-toecho-repliesvalice"))
	if want := "k1-" + hex.EncodeToString(sum[:]); say != want {
		t.Fatalf("%s, want %s", say, want)
	}
	chat := correlationID("k1", names, "example.Echo", "Chat", "echo-replies", []client.Header{{Key: "x-o", Value: []byte("v")}}, map[string]string{"jwt0": "alice"})
	if say[len(say)-16:] == chat[len(chat)-16:] || say[:len(say)-16] == chat[:len(chat)-16] {
		t.Fatalf("Say %s and Chat %s share a half", say, chat)
	}
}

// A call's fingerprint grows with its messages: a retry matches the log at
// its last record, is refused at the first difference, and when it ends
// before the logged call did.
func TestKeyCheck(t *testing.T) {
	use := &kafkaroute.KeyUse{Key: "k1", Slot: "s", What: whatCall}
	fresh := func() *keyCheck {
		return newKeyCheck(use, "gateway:fingerprint", []string{"example.Echo", "Chat", "r"}, nil, []byte("key"), route.Headers{{Name: "x-request-id", Value: "1"}})
	}
	// The first call: a, b, end; each record's fingerprint.
	first := fresh()
	var fps []string
	for _, m := range [][]byte{[]byte("a"), []byte("b"), nil} {
		if write, _, err := first.next(m); !write || err != nil {
			t.Fatalf("a new call: write %v, %v", write, err)
		}
		fps = append(fps, string(first.headers(nil)[0].Value))
	}
	if fps[0] == fps[1] || fps[1] == fps[2] || !strings.HasPrefix(fps[2], "s.") {
		t.Fatalf("fingerprints %q", fps)
	}
	logged := strings.TrimPrefix(fps[2], "s.")
	run := func(msgs ...[]byte) (writes int, verified bool, err error) {
		k := newKeyCheck(use, "gateway:fingerprint", []string{"example.Echo", "Chat", "r"}, nil, []byte("key"),
			route.Headers{{Name: "x-request-id", Value: "2"}}) // volatile: another value on a retry
		k.expect("t", 3, logged, true, time.Unix(0, 0))
		for _, m := range msgs {
			w, ok, err := k.next(m)
			if err != nil {
				return writes, verified, err
			}
			verified = verified || ok
			if w {
				writes++
			}
		}
		return writes, verified, nil
	}
	if n, ok, err := run([]byte("a"), []byte("b"), nil); n != 0 || !ok || err != nil {
		t.Errorf("the same call: %d writes, verified %v, %v", n, ok, err)
	}
	for name, msgs := range map[string][][]byte{
		"a third message": {[]byte("a"), []byte("b"), []byte("c")},
		"another second":  {[]byte("a"), []byte("c"), nil},
		"ends early":      {[]byte("a"), nil},
	} {
		if n, _, err := run(msgs...); n != 0 || err == nil || !strings.Contains(err.Error(), `"k1"`) {
			t.Errorf("%s: %d writes, %v, want refused", name, n, err)
		}
	}
	var none *keyCheck
	if w, _, err := none.next([]byte("x")); !w || err != nil || none.end() != nil || !none.verified() {
		t.Error("a call without a key is not written as it comes")
	}
}
