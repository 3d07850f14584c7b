package httpkafka

import (
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// A request record lists the request's headers in the order Envoy handed
// them over (Envoy: pseudo-headers first, then arrival order), nothing
// sorted, with the binding's headers after them.
func TestRequestRecordKeepsHeaderOrder(t *testing.T) {
	in := route.Headers{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/orders/1"},
		{Name: ":authority", Value: "h"}, {Name: "zeta", Value: "1"}, {Name: "content-type", Value: "application/json"},
		{Name: "alpha", Value: "2"}, {Name: "zeta", Value: "3"}, {Name: "x-request-id", Value: "r"},
	}
	out := requestHeaders(newCorrelation(), in, nil, "gateway:reply-to", "replies", "gateway:correlation-id", "gateway:fingerprint", nil)
	var got []string
	for _, h := range out {
		got = append(got, h.Key+"="+string(h.Value))
	}
	want := ":method=POST :scheme=http :path=/orders/1 :authority=h zeta=1 content-type=application/json alpha=2 zeta=3 x-request-id=r gateway:reply-to=replies"
	if strings.Join(got, " ") != want {
		t.Errorf("record headers\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
}
