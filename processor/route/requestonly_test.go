package route

import "testing"

func TestRequestOnly(t *testing.T) {
	for _, n := range []string{"x-request-id", "origin", "referer", "if-match", "accept-encoding", "access-control-request-method", "idempotency-key"} {
		if !RequestOnly(n) {
			t.Errorf("%s is not request-only", n)
		}
	}
	for _, n := range []string{"etag", "location", "content-type", "x-custom", "access-control-allow-origin", "custom-bin"} {
		if RequestOnly(n) {
			t.Errorf("%s is request-only", n)
		}
	}
}
