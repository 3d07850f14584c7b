package grpcwire

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// IsGRPCContentType reports whether a request content-type makes the request a
// gRPC request, by Envoy's rule (Grpc::Common::isGrpcRequestHeaders):
// exactly application/grpc, or application/grpc+<subtype>. application/grpc-web
// is not gRPC.
func IsGRPCContentType(ct string) bool {
	const base = "application/grpc"
	if !strings.HasPrefix(ct, base) {
		return false
	}
	return len(ct) == len(base) || ct[len(base)] == '+'
}

// EncodeMessage percent-encodes a grpc-message value as the gRPC HTTP/2
// protocol requires: bytes of the UTF-8 string outside 0x20–0x7E, and '%',
// become %XX (upper-case hex); everything else is sent as is.
func EncodeMessage(msg string) string {
	n := 0
	for i := 0; i < len(msg); i++ {
		if needsEscape(msg[i]) {
			n++
		}
	}
	if n == 0 {
		return msg
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(msg)+2*n)
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if needsEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func needsEscape(c byte) bool { return c < 0x20 || c > 0x7e || c == '%' }

// DecodeMessage reverses EncodeMessage. As the protocol asks of receivers, a
// '%' not followed by two hex digits is kept literally rather than refused.
func DecodeMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// ErrBadTimeout is wrapped by ParseTimeout's errors.
var ErrBadTimeout = errors.New("invalid grpc-timeout")

// ParseTimeout parses a grpc-timeout header: 1 to 8 ASCII digits and a unit
// (H, M, S, m, u, n).
func ParseTimeout(s string) (time.Duration, error) {
	if len(s) < 2 || len(s) > 9 {
		return 0, fmt.Errorf("%w %q", ErrBadTimeout, s)
	}
	digits, unit := s[:len(s)-1], s[len(s)-1]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, fmt.Errorf("%w %q", ErrBadTimeout, s)
		}
	}
	v, _ := strconv.ParseInt(digits, 10, 64) // at most 8 digits: cannot fail
	var d time.Duration
	switch unit {
	case 'H':
		d = time.Hour
	case 'M':
		d = time.Minute
	case 'S':
		d = time.Second
	case 'm':
		d = time.Millisecond
	case 'u':
		d = time.Microsecond
	case 'n':
		d = time.Nanosecond
	default:
		return 0, fmt.Errorf("%w %q", ErrBadTimeout, s)
	}
	if v > int64(math.MaxInt64/d) {
		// 99999999H does not fit in a Duration; it means "no deadline" in practice.
		return time.Duration(math.MaxInt64), nil
	}
	return time.Duration(v) * d, nil
}

// CodeName is the canonical upper-case name of a gRPC status code
// (UNIMPLEMENTED, RESOURCE_EXHAUSTED, …), as used in metrics and logs.
func CodeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE_" + strconv.Itoa(int(c))
}

var codeNames = [...]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// HTTPStatus is the HTTP status that corresponds to a gRPC code in the
// canonical mapping of google.rpc.Code (used where a gRPC outcome must be
// expressed as an HTTP status, e.g. in access logs and metrics).
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // client closed request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	default: // Unknown, Internal, DataLoss
		return http.StatusInternalServerError
	}
}

// CodeFromHTTP is the gRPC code a client concludes from an HTTP status that
// came without a grpc-status (gRPC's table:
// https://github.com/grpc/grpc/blob/master/doc/http-grpc-status-mapping.md).
// Envoy applies the same table to a local reply for a gRPC request that has
// no grpc_status, which is why the processor always sets grpc_status itself.
func CodeFromHTTP(status int) codes.Code {
	switch status {
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	default:
		return codes.Unknown
	}
}
