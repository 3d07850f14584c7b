package httpkafka

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// replyResponse turns the first reply record of a request into its HTTP
// response (docs/design.md#http-kafka-produce). The responder is trusted with
// the status, headers and body it chose, not with the response's framing:
//   - `:status` must be 200–599 (else 502); a reply without one is a 200,
//     as the reference implementation answers;
//   - pseudo-headers, hop-by-hop headers, content-length, the binding's
//     correlation and reply-to headers, request-only names
//     (route.RequestOnly), and names that are not HTTP tokens (so every
//     `gateway:*` header) are dropped, as are values with control
//     characters (a newline would split the response);
//   - 204 and 304 carry no body; a body without a content-type is
//     application/octet-stream.
func replyResponse(rec *client.Record, dropNames ...string) *handler.HTTPResponse {
	status := http.StatusOK
	seen := false
	// The response with room for a few headers, in one allocation.
	a := new(struct {
		resp handler.HTTPResponse
		hs   [4]route.Header
	})
	resp := &a.resp
	resp.Headers = a.hs[:0]
	for _, h := range rec.Headers {
		if h.Key == ":status" {
			if seen {
				continue
			}
			seen = true
			n, err := strconv.Atoi(string(h.Value))
			if err != nil || n < 200 || n > 599 {
				return handler.ProblemResponse(http.StatusBadGateway,
					fmt.Sprintf("the reply to this request has :status %q, which is not an HTTP status from 200 to 599", truncate(string(h.Value), 32)))
			}
			status = n
			continue
		}
		name := strings.ToLower(h.Key)
		if !replyHeaderAllowed(name, dropNames) || !httpguts.ValidHeaderFieldValue(string(h.Value)) {
			continue
		}
		resp.Headers = append(resp.Headers, route.Header{Name: name, Value: string(h.Value)})
	}
	resp.Status = status
	if status != http.StatusNoContent && status != http.StatusNotModified {
		resp.Body = rec.Value
		if len(resp.Body) > 0 && !hasHeader(resp.Headers, "content-type") {
			// Said here rather than left to Envoy, whose local replies
			// would call the bytes text/plain.
			resp.Headers = append(resp.Headers, route.Header{Name: "content-type", Value: "application/octet-stream"})
		}
	}
	return resp
}

func replyHeaderAllowed(name string, drop []string) bool {
	if name == "" || name[0] == ':' || !httpguts.ValidHeaderFieldName(name) || route.RequestOnly(name) {
		return false
	}
	switch name {
	case "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
		"upgrade", "te", "trailer":
		return false
	}
	for _, d := range drop {
		if name == d {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func hasHeader(hs []route.Header, name string) bool {
	_, ok := route.Headers(hs).Lookup(name)
	return ok
}
