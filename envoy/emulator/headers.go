package emulator

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Header is one header entry as Envoy's header map holds it: a lower-case
// key and the value's bytes. Repeated headers are repeated entries.
type Header struct {
	Key   string
	Value string
}

// Headers is an ordered header list.
type Headers []Header

// Get returns the first value of key and whether it is present.
func (h Headers) Get(key string) (string, bool) {
	for _, e := range h {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// Values returns every value of key in order.
func (h Headers) Values(key string) []string {
	var out []string
	for _, e := range h {
		if e.Key == key {
			out = append(out, e.Value)
		}
	}
	return out
}

// set replaces every entry of key with one entry (Envoy's setCopy).
func (h *Headers) set(key, value string) {
	for i, e := range *h {
		if e.Key == key {
			(*h)[i].Value = value
			h.removeFrom(key, i+1)
			return
		}
	}
	*h = append(*h, Header{key, value})
}

func (h *Headers) add(key, value string) { *h = append(*h, Header{key, value}) }

func (h *Headers) remove(key string) { h.removeFrom(key, 0) }

func (h *Headers) removeFrom(key string, from int) {
	out := (*h)[:from]
	for _, e := range (*h)[from:] {
		if e.Key != key {
			out = append(out, e)
		}
	}
	*h = out
}

// proto encodes the list as Envoy's MutationUtils::headersToProto does:
// every entry as HeaderValue{key, raw_value}; value is never filled
// ([code][test]).
func (h Headers) proto() *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(h))}
	for _, e := range h {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: e.Key, RawValue: []byte(e.Value)})
	}
	return m
}

// hopByHop are the request headers the HCM removes before the filter chain
// (ConnectionManagerUtility::mutateRequestHeaders: connection, upgrade,
// keep-alive, proxy-connection, transfer-encoding [code, HCM]); expect is
// consumed by the HCM's own 100-continue handling [code, HCM].
var hopByHop = map[string]bool{
	"connection":        true,
	"upgrade":           true,
	"keep-alive":        true,
	"proxy-connection":  true,
	"transfer-encoding": true,
	"http2-settings":    true,
	"expect":            true,
}

// inlineRequestHeaders are the regular (not pseudo) headers of Envoy's
// built-in inline request header list (INLINE_REQ_HEADERS and
// INLINE_REQ_RESP_HEADERS in envoy/http/header_map.h). Extensions compiled
// into an Envoy build may register more (RegisterCustomInlineHeader); those
// depend on the build and are not joined here. Hop-by-hop ones are removed
// before this matters.
var inlineRequestHeaders = map[string]bool{
	"connection": true, "content-type": true, "x-envoy-decorator-operation": true, "keep-alive": true,
	"proxy-connection": true, "proxy-status": true, "x-request-id": true, "transfer-encoding": true,
	"upgrade": true, "via": true, "content-length": true, "x-envoy-attempt-count": true,
	"x-client-trace-id": true, "x-envoy-downstream-service-cluster": true, "x-envoy-downstream-service-node": true,
	"x-envoy-external-address": true, "x-envoy-force-trace": true, "x-envoy-hedge-on-per-try-timeout": true,
	"x-envoy-internal": true, "x-envoy-ip-tags": true, "x-envoy-retry-on": true, "x-envoy-retry-grpc-on": true,
	"x-envoy-retriable-status-codes": true, "x-envoy-retriable-header-names": true, "x-envoy-original-path": true,
	"x-envoy-original-url": true, "x-envoy-upstream-alt-stat-name": true,
	"x-envoy-upstream-rq-timeout-alt-response": true, "expect": true, "x-forwarded-client-cert": true,
	"x-forwarded-for": true, "x-forwarded-host": true, "x-forwarded-proto": true, "grpc-timeout": true,
	"te": true, "user-agent": true, "x-envoy-expected-rq-timeout-ms": true, "x-envoy-max-retries": true,
	"x-envoy-upstream-rq-timeout-ms": true, "x-envoy-upstream-rq-per-try-timeout-ms": true,
	"x-envoy-upstream-stream-duration-ms": true,
}

// DownstreamHeaders returns the request headers as the HCM hands them to
// the ext_proc filter: pseudo-headers :authority (HTTP/1.1 Host), :path,
// :method, :scheme first, then the regular headers with lower-case keys,
// hop-by-hop headers removed, x-forwarded-proto added when absent and
// x-request-id generated when absent ([code][test]; the
// defaults use_remote_address=false and generate_request_id=true are
// assumed), repeated inline headers joined. Regular headers are sorted by
// key, values in arrival order:
// Envoy keeps wire order, which net/http does not expose, so the processor
// must not depend on header order.
//
// [rule request-headers-encoding] Request headers reach the processor as
// HeaderValue{key, raw_value} (value never filled), lower-case keys,
// repeated headers as repeated entries, pseudo-headers included (HTTP/1
// Host as :authority), hop-by-hop headers removed, x-forwarded-proto and
// x-request-id added when absent.
// source: source/extensions/filters/http/ext_proc/mutation_utils.cc MutationUtils::headersToProto; source/common/http/conn_manager_utility.cc ConnectionManagerUtility::mutateRequestHeaders
// envoy-test: GetAndSetHeaders (ext_proc_integration_test.cc)
// ours: TestHeaderEncodingHTTP1, TestHeaderEncodingH2C
func DownstreamHeaders(r *http.Request) Headers {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	path := r.RequestURI
	if !strings.HasPrefix(path, "/") && r.URL != nil {
		// Absolute-form targets become origin-form, as Envoy's HTTP/1 codec does.
		path = r.URL.RequestURI()
	}
	h := Headers{
		{":authority", r.Host},
		{":path", path},
		{":method", r.Method},
		{":scheme", scheme},
	}
	if r.Method == http.MethodConnect {
		// [rule connect-has-no-path] A CONNECT (authority-form, no
		// upgrade_configs) is not refused: it goes through the filter
		// chain with :authority, :method and :scheme but no :path, so no
		// route matches and one let through ends in 404 (route_not_found).
		// source: source/common/http/conn_manager_impl.cc ActiveStream::decodeHeaders; source/common/router/config_impl.cc RouteMatcher::route
		// envoy-test: DownstreamProtocolIntegrationTest.ConnectIsBlocked
		// ours: TestConnectReachesProcessor
		h = append(h[:1], h[2:]...)
	}
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		if hopByHop[lk] || lk == "host" {
			continue
		}
		vs := r.Header[k]
		switch {
		case lk == "cookie" && r.ProtoMajor == 2 && len(vs) > 1:
			// [rule h2-cookie-crumbs-joined] HTTP/2 cookie crumbs reach the
			// filters as one cookie header joined with "; ".
			// source: source/common/http/http2/codec_impl.cc ConnectionImpl::StreamImpl::saveHeader, Utility::reconstituteCrumbledCookies
			// envoy-test: Http2CodecUtility.reconstituteCrumbledCookies
			// ours: TestHeaderEncodingH2C
			vs = []string{strings.Join(vs, "; ")}
		case inlineRequestHeaders[lk] && len(vs) > 1:
			// [rule repeated-inline-headers-joined] Repeated copies of an
			// inline request header (user-agent, x-forwarded-for,
			// content-type, ...) become one header, values joined with ","
			// (no space); other headers stay repeated entries.
			// source: source/common/http/header_map_impl.cc HeaderMapImpl::insertByKey, appendToHeader; envoy/http/header_map.h INLINE_REQ_HEADERS
			// envoy-test: HeaderMapImplTest.DoubleInlineAdd
			// ours: TestRepeatedInlineHeadersJoined
			vs = []string{strings.Join(vs, ",")}
		}
		for _, v := range vs {
			h.add(lk, v)
		}
	}
	if _, ok := h.Get("x-forwarded-proto"); !ok {
		h.add("x-forwarded-proto", scheme)
	}
	if _, ok := h.Get("x-request-id"); !ok {
		h.add("x-request-id", newRequestID())
	}
	return h
}

// newRequestID returns a random UUID v4, the form Envoy's request id
// extension generates.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// isGRPCContentType is Grpc::Common::hasGrpcContentType: exactly
// application/grpc or application/grpc+... (grpc-web is not gRPC)
// ([code]).
func isGRPCContentType(ct string) bool {
	const g = "application/grpc"
	return strings.HasPrefix(ct, g) && (len(ct) == len(g) || ct[len(g)] == '+')
}

// isGRPCRequest is Grpc::Common::isGrpcRequestHeaders: a :path and a gRPC
// content-type.
//
// [rule grpc-request] A request is gRPC when it has a :path and its
// content-type is application/grpc or application/grpc+... (not
// grpc-web); only gRPC requests get gRPC-shaped local replies.
// source: source/common/grpc/common.cc Common::isGrpcRequestHeaders, Common::hasGrpcContentType
// envoy-test: none
// ours: TestImmediateResponseGRPC, TestConnectReachesProcessor
func isGRPCRequest(h Headers) bool {
	p, _ := h.Get(":path")
	ct, _ := h.Get("content-type")
	return p != "" && isGRPCContentType(ct)
}

// Mutation checking follows Filters::Common::MutationRules::Checker with
// the default (empty) HeaderMutationRules, which is what our envoy.yaml
// configures ([code]): host, :authority, :method, :scheme and
// x-envoy-* may not be changed; no ":" header and not host may be removed;
// appending to a ":" header is refused; refusals are silently ignored
// (disallow_is_error unset).
//
// [rule mutation-rules] Header mutations: removals, then sets, raw_value
// only (a HeaderValue with only value sets an empty value), only the
// deprecated append BoolValue honoured; changes to host, :authority,
// :method, :scheme and x-envoy-* are silently refused; an invalid name or
// value fails the mutation.
// source: source/extensions/filters/http/ext_proc/mutation_utils.cc MutationUtils::applyHeaderMutations; source/extensions/filters/common/mutation_rules/mutation_rules.cc Checker::check
// envoy-test: none
// ours: TestImmediateResponseHTTP, TestMisbehavingValueInsteadOfRawValue
type checkOp int

const (
	opSet checkOp = iota
	opAppend
	opRemove
)

func mutationAllowed(op checkOp, name, value string) bool {
	if op == opRemove && !isModifiable(name) {
		return false
	}
	switch name {
	case "host", ":authority", ":method", ":scheme":
		return false
	}
	if strings.HasPrefix(name, ":") && op == opAppend {
		return false
	}
	if strings.HasPrefix(name, "x-envoy") {
		return false
	}
	if op == opRemove {
		return true
	}
	if !strings.HasPrefix(name, ":") && !headerValueValid(value) {
		return false
	}
	if name == ":status" {
		s, err := strconv.ParseUint(value, 10, 32)
		if err != nil || s < 200 {
			return false
		}
	}
	return true
}

// isModifiable is HeaderUtility::isModifiableHeader.
func isModifiable(name string) bool {
	return !strings.HasPrefix(name, ":") && name != "host"
}

// headerNameValid approximates HeaderUtility::headerNameIsValid: HTTP token
// characters (RFC 9110 tchar), lower case only after a leading ':'.
func headerNameValid(name string) bool {
	rest := name
	pseudo := strings.HasPrefix(name, ":")
	if pseudo {
		rest = name[1:]
	}
	if rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if pseudo && c >= 'A' && c <= 'Z' {
			return false
		}
		if !isTchar(c) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// headerValueValid approximates HeaderUtility::headerValueIsValid: no NUL,
// CR or LF.
func headerValueValid(v string) bool {
	return !strings.ContainsAny(v, "\x00\r\n")
}

// applyHeaderMutation is MutationUtils::applyHeaderMutations with the
// default checker: removals first, then sets; only raw_value is read (a
// HeaderValue carrying only `value` sets an empty value
// [code]); only the deprecated `append` BoolValue is honoured; setting both
// value and raw_value or an invalid name/value is an error that stops the
// remaining mutations [code]. Header count and size limits are not
// emulated.
func applyHeaderMutation(m *extprocv3.HeaderMutation, h *Headers) error {
	if m == nil {
		return nil
	}
	for _, name := range m.GetRemoveHeaders() {
		if !headerNameValid(name) {
			return fmt.Errorf("invalid character in remove_headers mutation %q", name)
		}
		lname := strings.ToLower(name)
		if mutationAllowed(opRemove, lname, "") {
			h.remove(lname)
		}
	}
	for _, sh := range m.GetSetHeaders() {
		hv := sh.GetHeader()
		if hv == nil {
			continue
		}
		if hv.GetValue() != "" && len(hv.GetRawValue()) != 0 {
			return fmt.Errorf("only one of value or raw_value in the HeaderValue message should be set (%q)", hv.GetKey())
		}
		value := string(hv.GetRawValue())
		if !headerNameValid(hv.GetKey()) || !headerValueValid(value) {
			return fmt.Errorf("invalid character in set_headers mutation %q", hv.GetKey())
		}
		name := strings.ToLower(hv.GetKey())
		//nolint:staticcheck // SA1019: Envoy's ext_proc reads only the deprecated append field.
		appendIt := sh.GetAppend().GetValue()
		op := opSet
		if appendIt {
			if _, present := h.Get(name); present {
				op = opAppend
			}
		}
		if !mutationAllowed(op, name, value) {
			continue
		}
		if appendIt {
			h.add(name, value)
		} else {
			h.set(name, value)
		}
	}
	return nil
}

// protoToHeaders is MutationUtils::protoToHeaders as used for
// StreamedImmediateResponse headers and trailers: raw_value only, each
// entry through the checker (refused or invalid entries are dropped), and
// setCopy, so duplicate keys collapse to the last value [code].
func protoToHeaders(m *corev3.HeaderMap) Headers {
	var h Headers
	for _, hv := range m.GetHeaders() {
		name := strings.ToLower(hv.GetKey())
		value := string(hv.GetRawValue())
		if !headerNameValid(hv.GetKey()) || !mutationAllowed(opSet, name, value) {
			continue
		}
		h.set(name, value)
	}
	return h
}
