package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
)

// host is the :authority of the generated requests; nothing resolves or
// dials it.
const host = "kafka-ext-proc.bench"

// env is a run's system under test and its clients: the server side
// (broker, processor, no-op server) and the emulator clients that speak
// ext_proc to the processor as Envoy does.
type env struct {
	log      *slog.Logger
	settings envoy.Settings
	srv      servers
	split    bool
	procSide *side
	// broker is the embedded broker when it runs in this process apart
	// from a child's processor (options.brokerApart).
	broker *broker
}

// side is one ext_proc server as the load sees it: connections and one
// emulator client per connection.
type side struct {
	name    string
	conns   []*grpc.ClientConn
	clients []*emulator.Client
}

// shippedSettings are the ext_proc settings of the shipped envoy.yaml, which
// the emulator clients follow.
func shippedSettings() (envoy.Settings, error) {
	boot, err := envoy.Parse(envoy.DefaultYAML())
	if err != nil {
		return envoy.Settings{}, fmt.Errorf("the shipped envoy.yaml: %w", err)
	}
	settings, err := envoy.SettingsFrom(boot)
	if err != nil {
		return envoy.Settings{}, fmt.Errorf("the shipped envoy.yaml: %w", err)
	}
	return settings, nil
}

func startEnv(ctx context.Context, o *options, logger *slog.Logger) (_ *env, err error) {
	settings, err := shippedSettings()
	if err != nil {
		return nil, err
	}
	e := &env{log: logger, settings: settings, split: o.split}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	// Through typed variables: a nil *child in the interface would not be
	// a nil servers for close.
	if o.split {
		cc := childConfig{LogLevel: o.logLevel.String(), Profiles: o.profiles, Limits: o.limits}
		if o.profileDisk {
			cc.Profiles = profiles{}
		}
		if o.brokerApart {
			_, full, err := benchConfigs(o.limits)
			if err != nil {
				return nil, err
			}
			if e.broker, err = startBenchBroker(logger, full); err != nil {
				return nil, err
			}
			cc.Broker = e.broker.Addr()
		}
		c, err := startChild(ctx, cc)
		if err != nil {
			return nil, err
		}
		e.srv = c
	} else {
		l, err := startLocal(logger, o.limits, "")
		if err != nil {
			return nil, err
		}
		e.srv = l
	}
	e.procSide, err = e.dial("processor", e.srv.processorAddr(), o.conns)
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.procSide != nil {
		e.procSide.close()
	}
	if e.srv != nil {
		e.srv.close()
	}
	if e.broker != nil {
		e.broker.Close()
	}
}

// dial opens n connections to an ext_proc server at addr (loopback), each
// with the emulator's client on top, as Envoy's workers each hold one.
func (e *env) dial(name, addr string, n int, opts ...grpc.DialOption) (*side, error) {
	s := &side{name: name}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	for range n {
		conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("connecting to %s: %w", name, err)
		}
		// Connect now: the first measured request should not pay for it.
		conn.Connect()
		s.conns = append(s.conns, conn)
		c, err := emulator.NewClient(e.settings, conn, e.log.With("component", "emulator", "target", name))
		if err != nil {
			s.close()
			return nil, err
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

func (s *side) close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// client returns the emulator client worker i uses (round robin over the
// connections).
func (s *side) client(i int) *emulator.Client { return s.clients[i%len(s.clients)] }

// newRequest builds a GET as the HCM hands it to the ext_proc filter
// (emulator.DownstreamHeaders). hdr are extra header name/value pairs.
//
// The load reuses one Request for many exchanges, so they share an
// x-request-id; the processor only logs it, and building headers per request
// would add client-side allocations to what is measured.
func newRequest(c *emulator.Client, path string, hdr ...string) emulator.Request {
	return newRequestWith(c, http.MethodGet, path, true, hdr...)
}

// newRequestWith is newRequest for any method; eos false says a body
// follows the headers (exchangeBody sends it).
func newRequestWith(c *emulator.Client, method, path string, eos bool, hdr ...string) emulator.Request {
	r := &http.Request{
		Method: method, URL: &url.URL{Path: path}, RequestURI: path, Host: host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"User-Agent": {"kafka-ext-proc-load"}, "Accept": {"*/*"}},
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	h := emulator.DownstreamHeaders(r)
	return emulator.Request{Headers: h, EndOfStream: eos, Route: c.Route(h)}
}

// reply is what the downstream client received.
type reply struct {
	status  int
	headers emulator.Headers
	body    []byte
	at      time.Time // when the terminal action arrived
}

func (r reply) header(name string) string {
	v, _ := r.headers.Get(name)
	return v
}

// exchange runs one request through the ext_proc filter as the emulator's
// HTTP side does: Start, the filter's actions until the terminal one, then
// Close (Envoy's RST of the Process stream).
func exchange(ctx context.Context, c *emulator.Client, req emulator.Request) (reply, error) {
	return exchangeBody(ctx, c, req, nil)
}

// exchangeBody is exchange for a request with a body (req.EndOfStream
// false): the body goes in one chunk after the headers, as Envoy streams a
// small request body in FULL_DUPLEX_STREAMED.
func exchangeBody(ctx context.Context, c *emulator.Client, req emulator.Request, body []byte) (reply, error) {
	x := c.Start(ctx, req)
	defer x.Close()
	if !req.EndOfStream {
		if err := x.Body(body, true); err != nil {
			return reply{}, err
		}
	}
	var r reply
	for {
		a, err := x.Next(ctx)
		if err != nil {
			return r, err
		}
		switch a.Kind {
		case emulator.ActionLocalReply:
			return reply{status: a.Reply.Status, headers: a.Reply.Headers, body: a.Reply.Body, at: time.Now()}, nil
		case emulator.ActionContinue:
			return reply{status: a.Reply.Status, headers: a.Reply.Headers, body: a.Reply.Body},
				fmt.Errorf("the request continued past ext_proc (%s): the processor did not answer", a.Details)
		case emulator.ActionHeaders:
			r.status, r.headers = a.Status, a.Headers
		case emulator.ActionBody:
			r.body = append(r.body, a.Body...)
		case emulator.ActionReset:
			return r, fmt.Errorf("the stream was reset: %s", a.Details)
		}
		if a.Terminal() {
			r.at = time.Now()
			return r, nil
		}
	}
}

// jsonValue returns a JSON object of exactly size bytes (size >= minValue)
// naming key; seq tells versions of one key apart.
func jsonValue(key string, seq, size int) []byte {
	head := fmt.Sprintf(`{"id":%q,"seq":%d,"pad":"`, key, seq)
	const tail = `"}`
	pad := max(size-len(head)-len(tail), 0)
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// awaitAnswer polls the processor until a request is answered as want
// says: the view reads a write shortly after its acknowledgement, and the
// processor answers 503 until its views have caught up. Polling is bounded.
func (e *env) awaitAnswer(ctx context.Context, req emulator.Request, want func(reply) bool) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last reply
	var lastErr error
	for {
		last, lastErr = exchange(ctx, e.procSide.client(0), req)
		if lastErr == nil && want(last) {
			return last, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			path, _ := req.Headers.Get(":path")
			return last, fmt.Errorf("GET %s was not answered as expected in time (last: %d, %d bytes, err %v): %w",
				path, last.status, len(last.body), lastErr, ctx.Err())
		}
	}
}
