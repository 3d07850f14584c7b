package emulator

import (
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
)

// LocalReply is a complete response Envoy generates itself
// (sendLocalReply): from an ImmediateResponse, an ext_proc error, a route's
// direct_response, "no healthy upstream", an idle timeout or an HCM
// refusal.
type LocalReply struct {
	// Status is the HTTP status (200 for gRPC requests).
	Status int
	// Headers are the response headers without :status. For gRPC requests
	// they carry grpc-status and grpc-message: the reply is trailers-only.
	Headers Headers
	// Body is the response body; empty for gRPC and HEAD requests.
	Body []byte
	// Details is Envoy's %RESPONSE_CODE_DETAILS% for this reply (logs only).
	Details string
	// CloseConnection asks an HTTP/1 connection to close after the reply.
	CloseConnection bool
}

// replyInput is what Envoy's sendLocalReply receives.
type replyInput struct {
	code       int
	body       []byte
	mutate     func(*Headers)
	grpcStatus *uint32
	details    string
	grpc, head bool
}

// buildLocalReply is Http::Utility::prepareLocalReply/encodeLocalReply
// ([code]), without an HCM local_reply_config (our envoy.yaml
// has none).
func buildLocalReply(in replyInput) LocalReply {
	h := Headers{{":status", strconv.Itoa(in.code)}}
	if in.mutate != nil {
		in.mutate(&h)
	}
	rep := LocalReply{Details: in.details}
	if in.grpc {
		// [rule grpc-local-reply] A local reply to a gRPC request is
		// trailers-only: :status 200, content-type application/grpc,
		// grpc-status from a mutation, else grpc_status, else mapped from
		// the HTTP status; the body becomes a percent-encoded grpc-message.
		// source: source/common/http/utility.cc Utility::prepareLocalReply
		// envoy-test: HttpUtility.SendLocalGrpcReply
		// ours: TestImmediateResponseGRPC, TestImmediateResponseGRPCIsTrailersOnly
		//
		// gRPC: forced 200 + application/grpc; grpc-status precedence is a
		// mutation's grpc-status > ImmediateResponse.grpc_status > the HTTP
		// mapping of the reply's code; the body becomes a percent-encoded
		// grpc-message; content-length removed; trailers-only.
		h.set(":status", "200")
		h.set("content-type", "application/grpc")
		if _, ok := h.Get("grpc-status"); !ok {
			st := uint32(httpToGRPCStatus(in.code))
			if in.grpcStatus != nil {
				st = *in.grpcStatus
			}
			h.set("grpc-status", strconv.FormatUint(uint64(st), 10))
		}
		if len(in.body) > 0 {
			h.set("grpc-message", percentEncode(in.body))
		}
		h.remove("content-length")
		rep.Status = 200
		rep.Headers = withoutPseudo(h)
		return rep
	}
	// [rule local-reply-content-type] A local reply with a body gets
	// content-length and, unless a header mutation set one,
	// content-type: text/plain; an empty body drops both, even when a
	// mutation set them, whatever the status: an ImmediateResponse 304
	// keeps its etag and loses its content-type. HTTP/1's codec then adds
	// content-length: 0, except on a 204 or 304; HTTP/2 adds nothing.
	// source: source/common/http/utility.cc Utility::prepareLocalReply; source/common/http/http1/codec_impl.cc StreamEncoderImpl::encodeHeadersBase
	// envoy-test: HttpConnectionManagerImplTest.HitRequestBufferLimits, ExtProcIntegrationTest.GetAndRespondImmediately
	// ours: TestImmediateResponseHTTP, e2e.TestNotModifiedThroughEnvoy
	if len(in.body) > 0 {
		h.set("content-length", strconv.Itoa(len(in.body)))
		if _, ok := h.Get("content-type"); !ok {
			h.set("content-type", "text/plain")
		}
		if !in.head {
			rep.Body = in.body
		}
	} else {
		h.remove("content-length")
		h.remove("content-type")
	}
	rep.Status = in.code
	if s, _ := h.Get(":status"); s != "" {
		// A mutation may set :status (the checker allows a valid one).
		if n, err := strconv.Atoi(s); err == nil && n >= 200 {
			rep.Status = n
		}
	}
	rep.Headers = withoutPseudo(h)
	return rep
}

func withoutPseudo(h Headers) Headers {
	out := make(Headers, 0, len(h))
	for _, e := range h {
		if !strings.HasPrefix(e.Key, ":") {
			out = append(out, e)
		}
	}
	return out
}

// httpToGRPCStatus is Grpc::Utility::httpToGrpcStatus [code].
//
// [rule http-to-grpc-status] HTTP statuses map to gRPC codes: 400
// INTERNAL, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 UNIMPLEMENTED,
// 429, 502, 503 and 504 UNAVAILABLE, anything else UNKNOWN.
// source: source/common/grpc/status.cc Utility::httpToGrpcStatus
// envoy-test: none
// ours: TestMisbehavingGRPCImmediateWithoutGRPCStatus, TestStreamFailure, TestImmediateResponseGRPC
func httpToGRPCStatus(code int) codes.Code {
	switch code {
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	default:
		return codes.Unknown
	}
}

// percentEncode is Envoy's PercentEncoding::encode for grpc-message: bytes
// below 0x20, from 0x7E ('~') up, and '%' become %XX in upper-case hex
// ([code]).
func percentEncode(b []byte) string {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	for _, c := range b {
		if c < 0x20 || c >= 0x7e || c == '%' {
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&0xf])
			continue
		}
		sb.WriteByte(c)
	}
	return sb.String()
}
