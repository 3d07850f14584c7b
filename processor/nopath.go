package processor

import (
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
)

// noPathFailure answers a request without :path. Envoy passes a CONNECT
// (authority-form, nothing to route on) through its filters without :path;
// let through, Envoy's router would answer 404 because no route matches a
// request without a path. The processor answers the same status, and says
// why.
func noPathFailure(method string) *failure {
	return &failure{http: http.StatusNotFound, grpc: codes.Unimplemented,
		detail: fmt.Sprintf("a %s request has no path: kafka-ext-proc serves only requests for a path (no CONNECT tunnels)", method)}
}
