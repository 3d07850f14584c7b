package processor

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// failure is an answer the exchange makes itself, not a handler (no
// binding or route for the request, a request it cannot read), rendered as
// problem+json for HTTP and as a status for gRPC.
type failure struct {
	http    int
	grpc    codes.Code
	detail  string
	headers []route.Header
}

// routeFailure turns a matching error into its answer: 405 with allow for a
// path whose routes take other methods, 403 or 401 for a guard, else 404.
func routeFailure(err error, what string) *failure {
	var ge *route.GuardError
	var me *route.MethodError
	switch {
	case errors.As(err, &me):
		allow := strings.Join(me.Allow, ", ")
		return &failure{http: http.StatusMethodNotAllowed, grpc: codes.Unimplemented,
			detail:  fmt.Sprintf("no route answers %s; the routes of this path accept %s", what, allow),
			headers: []route.Header{{Name: "allow", Value: allow}}}
	case errors.As(err, &ge) && ge.Forbidden:
		return &failure{http: http.StatusForbidden, grpc: codes.PermissionDenied,
			detail: fmt.Sprintf("the credentials lack role(s) %s required by guard %q", strings.Join(ge.Missing, ", "), ge.Guard)}
	case errors.As(err, &ge):
		return &failure{http: http.StatusUnauthorized, grpc: codes.Unauthenticated,
			detail:  fmt.Sprintf("send valid credentials (authorization: Bearer <token>) for guard %q: %v", ge.Guard, ge.Err),
			headers: []route.Header{{Name: "www-authenticate", Value: "Bearer"}}}
	default:
		return &failure{http: http.StatusNotFound, grpc: codes.Unimplemented, detail: "no route matches " + what}
	}
}

// fail sends the exchange's own terminal answer.
func (x *exchange) fail(f *failure) {
	var err error
	if x.w.grpc {
		code := f.grpc
		if code == codes.OK { // a failure written for HTTP only: never answer it as a success
			code = codes.Internal
			if f.http == http.StatusBadRequest {
				code = codes.InvalidArgument
			}
		}
		err = x.w.finishGRPC(handler.Status{Code: code, Message: f.detail, Trailers: f.headers})
	} else {
		st := f.http
		if st == 0 {
			st = grpcwire.HTTPStatus(f.grpc)
		}
		err = x.w.answerHTTP(handler.ProblemResponse(st, f.detail, f.headers...))
	}
	x.logSendErr(err)
}

func (x *exchange) failAndLinger(f *failure) error {
	x.fail(f)
	x.linger()
	return nil
}

func (x *exchange) logSendErr(err error) {
	if err == nil || errors.Is(err, errAnswered) {
		return
	}
	if x.ctx.Err() != nil || status.Code(err) == codes.Canceled {
		if x.debugging() {
			x.logger().Debug("answer not sent: the stream was cancelled", "err", err)
		}
		return
	}
	x.logger().Warn("sending the answer failed", "err", err)
}
