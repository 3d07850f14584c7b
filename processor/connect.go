package processor

import (
	"net/http"

	"google.golang.org/grpc/codes"
)

// connectFailure answers a CONNECT. Envoy does not refuse one without
// upgrade_configs: it passes the request through its filters without :path
// (authority-form, nothing to route on), and its router would answer 404
// because no route matches a request without a path. The processor answers
// the same status, and says why.
func connectFailure() *failure {
	return &failure{http: http.StatusNotFound, grpc: codes.Unimplemented,
		detail: "CONNECT is not served: a CONNECT request has no path, and kafka-ext-proc answers only requests for a path"}
}
