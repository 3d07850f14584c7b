package route

import "strings"

// RequestOnly reports the header names that mean something only on a
// request, so an answer built from a Kafka record never carries them: when
// reply-to is the request topic (the echo pattern), the reply is the request
// record itself, and its headers must not come back as if the server had
// said them. They are what Envoy adds to the request (x-request-id), a
// request's context and preconditions (RFC 9110: expect, from, referer,
// accept*, if-*), the browser's origin and preflight fields (origin,
// access-control-request-*), and the idempotency key a retry carries.
func RequestOnly(name string) bool {
	switch name {
	case "x-request-id", "origin", "referer", "from", "expect", "accept", "idempotency-key":
		return true
	}
	return strings.HasPrefix(name, "accept-") || strings.HasPrefix(name, "if-") ||
		strings.HasPrefix(name, "access-control-request-")
}
