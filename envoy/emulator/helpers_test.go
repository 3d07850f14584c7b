package emulator

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// wait is the upper bound for any awaited event; tests never sleep.
const wait = 5 * time.Second

// baseSettings mirrors envoy/envoy.yaml.
func baseSettings() envoy.Settings {
	return envoy.Settings{
		StreamIdleTimeout:   300 * time.Second,
		MaxRequestHeadersKB: 60,
		CodecType:           "AUTO",
		ExtProc: envoy.ExtProc{
			ClusterName:         "kafka_ext_proc",
			InitialMetadata:     map[string]string{"x-filter-md": "filter", "x-kafka-ext-proc-binding": "filter-level"},
			RequestHeaderMode:   "SEND",
			RequestBodyMode:     "FULL_DUPLEX_STREAMED",
			RequestTrailerMode:  "SEND",
			ResponseHeaderMode:  "SKIP",
			ResponseBodyMode:    "NONE",
			ResponseTrailerMode: "SKIP",
			StatusOnError:       503,
			MessageTimeout:      time.Millisecond, // would fire at once if FDS had a timer
		},
		Routes: []envoy.Route{
			{Name: "grpc", Prefix: "/", GRPC: true, Cluster: "placeholder", TimeoutSet: true, IdleTimeout: time.Hour,
				ExtProcInitialMetadata: map[string]string{"x-kafka-ext-proc-binding": "grpc0"}},
			{Name: "http", Prefix: "/", DirectResponseStatus: 503, DirectResponseBody: "no answer from kafka-ext-proc\n",
				ExtProcInitialMetadata: map[string]string{"x-kafka-ext-proc-binding": "http0"}},
		},
	}
}

// procStream is one Process stream as the scripted server sees it.
type procStream struct {
	srv       extprocv3.ExternalProcessor_ProcessServer
	ctx       context.Context
	md        metadata.MD
	in        chan *extprocv3.ProcessingRequest
	recvErr   error // valid once in is closed
	scriptErr chan error
}

// procServer is a real ext_proc gRPC server on loopback whose every stream
// runs script.
type procServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	t       *testing.T
	script  func(ps *procStream) error
	streams chan *procStream
	addr    string
}

func startProcessor(t *testing.T, script func(ps *procStream) error) *procServer {
	t.Helper()
	p := &procServer{t: t, script: script, streams: make(chan *procStream, 64)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	s := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(s, p)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return p
}

func (p *procServer) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(srv.Context())
	ps := &procStream{srv: srv, ctx: srv.Context(), md: md, in: make(chan *extprocv3.ProcessingRequest, 1024), scriptErr: make(chan error, 1)}
	go func() {
		for {
			m, err := srv.Recv()
			if err != nil {
				ps.recvErr = err
				close(ps.in)
				return
			}
			ps.in <- m
		}
	}()
	p.streams <- ps
	err := p.script(ps)
	ps.scriptErr <- err
	return err
}

// stream returns the next Process stream the server accepted.
func (p *procServer) stream(t *testing.T) *procStream {
	t.Helper()
	select {
	case ps := <-p.streams:
		return ps
	case <-time.After(wait):
		t.Fatal("no Process stream reached the processor")
		return nil
	}
}

// next returns the next ProcessingRequest; nil when the stream ended.
func (ps *procStream) next() *extprocv3.ProcessingRequest {
	select {
	case m := <-ps.in:
		return m
	case <-time.After(wait):
		return nil
	}
}

// recvEnd waits until Recv fails and returns its error.
func (ps *procStream) recvEnd() error {
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-ps.in:
			if !ok {
				return ps.recvErr
			}
		case <-deadline:
			return errors.New("stream did not end")
		}
	}
}

// cancelled waits for the stream context to end (Envoy's RST).
func (ps *procStream) cancelled() bool {
	select {
	case <-ps.ctx.Done():
		return true
	case <-time.After(wait):
		return false
	}
}

func (ps *procStream) send(r *extprocv3.ProcessingResponse) error { return ps.srv.Send(r) }

// readUntilEOS drains request messages until one ends the request.
func (ps *procStream) readUntilEOS() ([]*extprocv3.ProcessingRequest, bool) {
	var got []*extprocv3.ProcessingRequest
	for {
		m := ps.next()
		if m == nil {
			return got, false
		}
		got = append(got, m)
		switch r := m.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			if r.RequestHeaders.GetEndOfStream() {
				return got, true
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			if r.RequestBody.GetEndOfStream() {
				return got, true
			}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			return got, true
		}
	}
}

func startEmulator(t *testing.T, s envoy.Settings, procAddr string) string {
	t.Helper()
	conn, err := grpc.NewClient(procAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e, err := New(Options{Settings: s, Processor: conn, Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return serveEmulator(t, e)
}

// serveEmulator serves e on a free port until the test ends.
func serveEmulator(t *testing.T, e *Emulator) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func h1Client(t *testing.T) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: wait}
}

func h2cClient(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func grpcClient(t *testing.T, addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Response builders.

func u32(v uint32) *uint32 { return &v }

func bodyReply() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: []byte("x")},
		}}},
	}}}
}

// gRPC framing.

func frame(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// deframer reassembles length-prefixed gRPC messages across chunks.
type deframer struct{ buf []byte }

func (d *deframer) push(b []byte) []string {
	d.buf = append(d.buf, b...)
	var out []string
	for len(d.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(d.buf[1:5]))
		if len(d.buf) < 5+n {
			break
		}
		var s wrapperspb.StringValue
		if err := proto.Unmarshal(d.buf[5:5+n], &s); err != nil {
			out = append(out, "!"+err.Error())
		} else {
			out = append(out, s.GetValue())
		}
		d.buf = d.buf[5+n:]
	}
	return out
}

// headerOf returns the RawValue of key in a request_headers message and
// fails when Value is filled.
func headerOf(t *testing.T, m *corev3.HeaderMap, key string) []string {
	t.Helper()
	var out []string
	for _, h := range m.GetHeaders() {
		if h.GetValue() != "" {
			t.Errorf("header %q has Value %q: Envoy fills only RawValue", h.GetKey(), h.GetValue())
		}
		if h.GetKey() == key {
			out = append(out, string(h.GetRawValue()))
		}
	}
	return out
}

// rawH2 is a frame-level HTTP/2 client, to see exactly what goes on the
// wire (trailers-only HEADERS, RST_STREAM after END_STREAM).
type rawH2 struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	mu   sync.Mutex
}

func dialRawH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(wait))
	c := &rawH2{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *rawH2) headers(id uint32, eos bool, kv ...string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: eos, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawH2) data(id uint32, eos bool, b []byte) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fr.WriteData(id, eos, b); err != nil {
		c.t.Fatal(err)
	}
}

// h2Event is one frame the server sent on a stream.
type h2Event struct {
	kind      string // "headers", "data", "rst"
	fields    map[string]string
	data      []byte
	endStream bool
	code      http2.ErrCode
}

func (e h2Event) String() string {
	switch e.kind {
	case "headers":
		return fmt.Sprintf("HEADERS%v eos=%v", e.fields, e.endStream)
	case "data":
		return fmt.Sprintf("DATA(%q) eos=%v", e.data, e.endStream)
	}
	return fmt.Sprintf("RST_STREAM(%v)", e.code)
}

// read returns the frames of stream id until stop says so, answering
// SETTINGS and PING on the way.
func (c *rawH2) read(id uint32, stop func(h2Event) bool) []h2Event {
	c.t.Helper()
	var evs []h2Event
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("read frame: %v (events so far %v)", err, evs)
		}
		var ev h2Event
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.mu.Lock()
				_ = c.fr.WriteSettingsAck()
				c.mu.Unlock()
			}
			continue
		case *http2.PingFrame:
			if f.IsAck() && f.Data == [8]byte{'d', 'o', 'n', 'e'} && id == 0 {
				return evs
			}
			continue
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			ev = h2Event{kind: "headers", fields: map[string]string{}, endStream: f.StreamEnded()}
			for _, hf := range f.Fields {
				ev.fields[hf.Name] = hf.Value
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			ev = h2Event{kind: "data", data: append([]byte(nil), f.Data()...), endStream: f.StreamEnded()}
		case *http2.RSTStreamFrame:
			if f.StreamID != id {
				continue
			}
			ev = h2Event{kind: "rst", code: f.ErrCode}
		default:
			continue
		}
		evs = append(evs, ev)
		if stop(ev) {
			return evs
		}
	}
}

// untilPingAck reads stream id's frames until the server answers a PING
// sent now: frames the server queued before it are all seen.
func (c *rawH2) untilPingAck(id uint32) []h2Event {
	c.t.Helper()
	c.mu.Lock()
	_ = c.fr.WritePing(false, [8]byte{'d', 'o', 'n', 'e'})
	c.mu.Unlock()
	var evs []h2Event
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if f.IsAck() {
				return evs
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				evs = append(evs, h2Event{kind: "rst", code: f.ErrCode})
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				evs = append(evs, h2Event{kind: "data", data: f.Data(), endStream: f.StreamEnded()})
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				evs = append(evs, h2Event{kind: "headers", endStream: f.StreamEnded()})
			}
		}
	}
}

func endOrReset(e h2Event) bool { return e.endStream || e.kind == "rst" }

// watchStream opens a server-streaming call through an emulator whose route
// has the given idle timeout, sends one request and half-closes.
func watchStream(t *testing.T, p *procServer, idle time.Duration) grpc.ClientStream {
	t.Helper()
	s := baseSettings()
	s.Routes[0].IdleTimeout = idle
	conn := grpcClient(t, startEmulator(t, s, p.addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/pkg.Svc/Watch")
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.SendMsg(wrapperspb.String("go"))
	_ = cs.CloseSend()
	return cs
}

// bigHeaders sends a header block of any size as HEADERS and CONTINUATION
// frames, ending the stream.
func (c *rawH2) bigHeaders(id uint32, kv ...string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	const maxFrame = 16384 // the initial SETTINGS_MAX_FRAME_SIZE
	block := c.hbuf.Bytes()
	first := block[:min(len(block), maxFrame)]
	block = block[len(first):]
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true, EndHeaders: len(block) == 0}); err != nil {
		c.t.Fatal(err)
	}
	for len(block) > 0 {
		part := block[:min(len(block), maxFrame)]
		block = block[len(part):]
		if err := c.fr.WriteContinuation(id, len(block) == 0, part); err != nil {
			c.t.Fatal(err)
		}
	}
}
