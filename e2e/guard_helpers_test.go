package e2e_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/guard"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const (
	guardIssuer      = "https://auth.example.com"
	guardAudience    = "https://api.example.com"
	guardOpsAudience = "https://ops.example.com"
)

// issuer is the identity provider of a test: its signing key and a forger's.
type issuer struct {
	t      *testing.T
	key    *rsa.PrivateKey
	forger *rsa.PrivateKey
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{t: t, key: key, forger: forger}
}

// jwks is the issuer's public JWKS document.
func (is *issuer) jwks() string {
	is.t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: is.key.Public(), KeyID: "k1", Use: "sig", Algorithm: "RS256"}}})
	if err != nil {
		is.t.Fatal(err)
	}
	return string(b)
}

// claims are valid claims for alice, changed by name/value pairs (a nil
// value removes the claim).
func (is *issuer) claims(kv ...any) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": guardIssuer, "aud": guardAudience, "sub": "alice", "scope": "read:items",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// token signs claims with the issuer's key (RS256, kid k1).
func (is *issuer) token(kv ...any) string {
	return is.signWith(is.key, is.claims(kv...))
}

func (is *issuer) signWith(key *rsa.PrivateKey, claims map[string]any) string {
	is.t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		is.t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		is.t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		is.t.Fatal(err)
	}
	return tok
}

// unsigned is the classic alg:none token.
func (is *issuer) unsigned() string {
	h, _ := json.Marshal(map[string]any{"alg": "none", "typ": "JWT"})
	c, _ := json.Marshal(is.claims("scope", "read:items admin"))
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c) + "."
}

// hmacWithPublicKey is the key-confusion forgery: HS256 keyed with the
// issuer's public key, which anyone can fetch.
func (is *issuer) hmacWithPublicKey() string {
	pub, _ := json.Marshal(jose.JSONWebKey{Key: is.key.Public()})
	h, _ := json.Marshal(map[string]any{"alg": "HS256", "typ": "JWT", "kid": "k1"})
	c, _ := json.Marshal(is.claims("scope", "read:items admin"))
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	m := hmac.New(sha256.New, pub)
	m.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// withGuards gives the processor a checker for the configuration's guards,
// as the binary does.
func withGuards(t *testing.T) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		g, err := guard.New(o.Config)
		if err != nil {
			t.Fatalf("guard.New: %v", err)
		}
		o.Guards = g
	}
}

// reached is what a guarded request brought to a handler.
type reached struct {
	route      int
	identities map[string]route.Identity
}

// guardSpy records which route and identities reached the handlers. HTTP
// goes on to the real http-kafka handler; gRPC is answered here with one
// empty message and OK, so the tests do not depend on what grpc-kafka does
// with the call.
type guardSpy struct {
	mu    sync.Mutex
	seen  []reached
	inner handler.HTTPHandler
}

func (s *guardSpy) record(m *route.Match) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, reached{route: m.Route.Index, identities: m.Identities})
}

func (s *guardSpy) HandleHTTP(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
	s.record(req.Match)
	return s.inner.HandleHTTP(ctx, req)
}

func (s *guardSpy) HandleGRPC(ctx context.Context, call *handler.GRPCCall) handler.Status {
	s.record(call.Match)
	if err := call.Out.Send(ctx, nil); err != nil {
		return handler.NewStatus(codes.Internal, err.Error())
	}
	return handler.OK()
}

// take returns what reached the handlers since the last take.
func (s *guardSpy) take() []reached {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

// one asserts exactly one request reached route index with the subject
// (empty: an unguarded route) for guard g.
func (s *guardSpy) one(t *testing.T, what string, index int, g, subject string) {
	t.Helper()
	got := s.take()
	if len(got) != 1 || got[0].route != index {
		t.Errorf("%s: reached %+v, want route %d once", what, got, index)
		return
	}
	if subject == "" {
		if got[0].identities != nil {
			t.Errorf("%s: identities %+v on an unguarded route", what, got[0].identities)
		}
		return
	}
	if id := got[0].identities[g]; id.Subject != subject {
		t.Errorf("%s: guard %s identity %+v, want %s", what, g, got[0].identities, subject)
	}
}

// none asserts that nothing reached a handler.
func (s *guardSpy) none(t *testing.T, what string) {
	t.Helper()
	if got := s.take(); len(got) != 0 {
		t.Errorf("%s: reached a handler: %+v", what, got)
	}
}

func spying(s *guardSpy) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		o.WrapHTTP = func(h handler.HTTPHandler) handler.HTTPHandler { s.inner = h; return s }
		o.WrapGRPC = func(handler.GRPCHandler) handler.GRPCHandler { return s }
	}
}

// problemDetail decodes an application/problem+json body's detail.
func problemDetail(t *testing.T, body string) string {
	t.Helper()
	var p handler.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problem: %q", body)
	}
	return p.Detail
}

// jwtAuthnFront starts an Envoy emulator in front of the processor at
// processorAddr with a stand-in for Envoy's jwt_authn filter on its ext_proc
// connection: a token that verifies against the issuer (RS256, issuer,
// audience, exp) has its payload put in metadata_context under
// envoy.filters.http.jwt_authn/<provider>, and the authorization header is
// removed (jwt_authn's default forward: false), so the processor can only
// know the caller from the metadata. A bad token is left without metadata,
// where Envoy would itself answer 401. It returns the front's address.
func jwtAuthnFront(t *testing.T, processorAddr string, is *issuer, provider string) string {
	t.Helper()
	boot, err := envoy.Parse(envoy.DefaultYAML())
	if err != nil {
		t.Fatal(err)
	}
	settings, err := envoy.SettingsFrom(boot)
	if err != nil {
		t.Fatal(err)
	}
	standIn := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &jwtAuthnStream{ClientStream: cs, is: is, provider: provider}, nil
	}
	conn, err := grpc.NewClient(processorAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStreamInterceptor(standIn))
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.New(emulator.Options{Settings: settings, Processor: conn})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- emu.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, context.Canceled) {
			t.Errorf("emulator: %v", err)
		}
		conn.Close()
	})
	return ln.Addr().String()
}

type jwtAuthnStream struct {
	grpc.ClientStream
	is       *issuer
	provider string
}

func (s *jwtAuthnStream) SendMsg(m any) error {
	req, ok := m.(*extprocv3.ProcessingRequest)
	if !ok || req.GetRequestHeaders() == nil {
		return s.ClientStream.SendMsg(m)
	}
	req = proto.Clone(req).(*extprocv3.ProcessingRequest)
	hm := req.GetRequestHeaders().GetHeaders()
	var token string
	hm.Headers = slices.DeleteFunc(hm.Headers, func(h *corev3.HeaderValue) bool {
		if h.GetKey() != "authorization" {
			return false
		}
		token, _ = strings.CutPrefix(string(h.GetRawValue()), "Bearer ")
		return true
	})
	if payload := s.is.verify(token); payload != nil {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			guard.JWTAuthnNamespace: {Fields: map[string]*structpb.Value{s.provider: structpb.NewStructValue(payload)}},
		}}
	}
	return s.ClientStream.SendMsg(req)
}

// verify is the stand-in's token check, as a jwt_authn provider configured
// with the issuer, the audience and the JWKS does it.
func (is *issuer) verify(token string) *structpb.Struct {
	if token == "" {
		return nil
	}
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil
	}
	payload, err := jws.Verify(is.key.Public())
	if err != nil {
		return nil
	}
	var c map[string]any
	if json.Unmarshal(payload, &c) != nil {
		return nil
	}
	exp, _ := c["exp"].(float64)
	if c["iss"] != guardIssuer || c["aud"] != guardAudience || time.Now().After(time.Unix(int64(exp), 0)) {
		return nil
	}
	st, err := structpb.NewStruct(c)
	if err != nil {
		return nil
	}
	return st
}
