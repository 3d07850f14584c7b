package emulator

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

func bodyOf(m *extprocv3.ProcessingRequest) (string, bool, bool) {
	b := m.GetRequestBody()
	return string(b.GetBody()), b.GetEndOfStream(), b != nil
}

// Every chunk goes to the processor as it
// arrives, before the processor has answered anything (no message timer:
// message_timeout is 1ms in these settings) and while a streamed local
// response runs; headers and body bytes reach the client at once.
func TestFDSChunksBeforeAndDuringStreamedAnswer(t *testing.T) {
	for _, proto := range []string{"h2c", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			gotTwo := make(chan struct{})
			readOne := make(chan struct{})
			ends := make(chan error, 1)
			p := startProcessor(t, func(ps *procStream) error {
				if h := ps.next().GetRequestHeaders(); h == nil || h.GetEndOfStream() {
					return errors.New("want request_headers without end_of_stream")
				}
				// Before any answer.
				if b, eos, ok := bodyOf(ps.next()); !ok || b != "one" || eos {
					t.Errorf("first chunk %q eos=%v, want \"one\" before the answer", b, eos)
				}
				if err := ps.send(extproctest.StreamedHeaders(false, ":status", "200", "content-type", "text/plain", "x-resp", "1")); err != nil {
					return err
				}
				// During the answer.
				if b, _, ok := bodyOf(ps.next()); !ok || b != "two" {
					t.Errorf("second chunk %q, want \"two\" during the answer", b)
				}
				close(gotTwo)
				if err := ps.send(extproctest.StreamedBody([]byte("resp-1"), false)); err != nil {
					return err
				}
				<-readOne // the client read resp-1 before resp-2 exists: flushed
				msgs, ok := ps.readUntilEOS()
				if !ok {
					t.Error("request end did not reach the processor during the answer")
				}
				var rest string
				for _, m := range msgs {
					b, _, _ := bodyOf(m)
					rest += b
				}
				if rest != "three" {
					t.Errorf("rest of the body %q, want \"three\"", rest)
				}
				if err := ps.send(extproctest.StreamedBody([]byte("resp-2"), true)); err != nil {
					return err
				}
				ends <- ps.recvEnd()
				return nil
			})
			addr := startEmulator(t, baseSettings(), p.addr)
			client := h2cClient(t)
			if proto == "HTTP/1.1" {
				client = h1Client(t)
			}
			pr, pw := io.Pipe()
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/upload", pr)
			go func() { _, _ = pw.Write([]byte("one")) }()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Resp") != "1" {
				t.Fatalf("headers %d %v", resp.StatusCode, resp.Header)
			}
			if _, err := pw.Write([]byte("two")); err != nil {
				t.Fatal(err)
			}
			<-gotTwo
			buf := make([]byte, 6)
			if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "resp-1" {
				t.Fatalf("first response bytes %q %v", buf, err)
			}
			close(readOne)
			if _, err := pw.Write([]byte("three")); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			rest, err := io.ReadAll(resp.Body)
			if err != nil || string(rest) != "resp-2" {
				t.Fatalf("rest %q %v", rest, err)
			}
			// The end of the local response cancels the Process stream.
			if err := <-ends; status.Code(err) != codes.Canceled {
				t.Errorf("Process stream ended with %v, want cancelled", err)
			}
		})
	}
}

// A gRPC success as StreamedImmediateResponse: framed
// messages and trailers; a real grpc-go bidi client gets every message and
// the status, while its own messages keep flowing to the processor.
func TestStreamedImmediateResponseGRPC(t *testing.T) {
	cases := []struct {
		name     string
		trailers []string
		code     codes.Code
		msg      string
	}{
		{"OK", []string{"grpc-status", "0"}, codes.OK, ""},
		{"error with message", []string{"grpc-status", "8", "grpc-message", "too%20many"}, codes.ResourceExhausted, "too many"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := startProcessor(t, func(ps *procStream) error {
				ps.next() // request_headers
				var d deframer
				started := false
				for {
					m := ps.next()
					if m == nil {
						return errors.New("request stream ended early")
					}
					body := m.GetRequestBody()
					for _, s := range d.push(body.GetBody()) {
						if !started {
							if err := ps.send(extproctest.StreamedHeaders(false, ":status", "200", "content-type", "application/grpc", "x-resp", "h")); err != nil {
								return err
							}
							started = true
						}
						if err := ps.send(extproctest.StreamedBody(frame(t, wrapperspb.String("echo:"+s)), false)); err != nil {
							return err
						}
					}
					if body.GetEndOfStream() {
						return ps.send(extproctest.StreamedTrailers(c.trailers...))
					}
				}
			})
			addr := startEmulator(t, baseSettings(), p.addr)
			conn := grpcClient(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/pkg.Svc/Chat")
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range []string{"a", "b"} {
				if err := cs.SendMsg(wrapperspb.String(in)); err != nil {
					t.Fatal(err)
				}
				var out wrapperspb.StringValue
				if err := cs.RecvMsg(&out); err != nil || out.GetValue() != "echo:"+in {
					t.Fatalf("recv %q %v, want echo:%s", out.GetValue(), err, in)
				}
			}
			if md, _ := cs.Header(); len(md.Get("x-resp")) != 1 {
				t.Errorf("response headers %v", md)
			}
			if err := cs.CloseSend(); err != nil {
				t.Fatal(err)
			}
			err = cs.RecvMsg(&wrapperspb.StringValue{})
			if c.code == codes.OK {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("end %v, want io.EOF (OK)", err)
				}
				return
			}
			if st := status.Convert(err); st.Code() != c.code || st.Message() != c.msg {
				t.Fatalf("end %v, want %v %q", err, c.code, c.msg)
			}
		})
	}
}

// The local response completes while the request is still
// incomplete -> the downstream stream is reset after the response
// (HTTP/2: RST_STREAM after END_STREAM); with a complete request, none.
func TestStreamedResponseResetsIncompleteRequestH2(t *testing.T) {
	for _, complete := range []bool{false, true} {
		name := "incomplete"
		if complete {
			name = "complete"
		}
		t.Run(name, func(t *testing.T) {
			p := startProcessor(t, func(ps *procStream) error {
				ps.next()
				if complete {
					ps.readUntilEOS()
				} else {
					ps.next() // the first chunk only
				}
				if err := ps.send(extproctest.StreamedHeaders(false, ":status", "200")); err != nil {
					return err
				}
				return ps.send(extproctest.StreamedBody([]byte("done"), true))
			})
			addr := startEmulator(t, baseSettings(), p.addr)
			c := dialRawH2(t, addr)
			c.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/up")
			c.data(1, complete, []byte("part"))
			evs := c.read(1, endOrReset)
			if len(evs) < 2 || evs[0].fields[":status"] != "200" || evs[len(evs)-1].kind == "rst" {
				t.Fatalf("frames %v, want the complete response", evs)
			}
			after := c.untilPingAck(1)
			var rst []h2Event
			for _, e := range after {
				if e.kind == "rst" {
					rst = append(rst, e)
				}
			}
			if complete && len(rst) > 0 {
				t.Errorf("reset %v after a complete exchange", rst)
			}
			if !complete && (len(rst) != 1 || rst[0].code != http2.ErrCodeNo) {
				t.Errorf("after the response: %v, want RST_STREAM(NO_ERROR)", after)
			}
		})
	}
}

// HTTP/1.1: the connection closes after the complete response (chunked
// streamed response properly terminated; content-length local reply), which
// says connection: close.
func TestIncompleteRequestClosesHTTP1Connection(t *testing.T) {
	for _, streamed := range []bool{true, false} {
		name := "immediate"
		if streamed {
			name = "streamed"
		}
		t.Run(name, func(t *testing.T) {
			p := startProcessor(t, func(ps *procStream) error {
				ps.next()
				ps.next() // first chunk
				if !streamed {
					return ps.send(extproctest.Immediate(413, "too big", nil, nil))
				}
				if err := ps.send(extproctest.StreamedHeaders(false, ":status", "200")); err != nil {
					return err
				}
				return ps.send(extproctest.StreamedBody([]byte("partial answer"), true))
			})
			addr := startEmulator(t, baseSettings(), p.addr)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(wait))
			_, _ = io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\nfirst")
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("body %q: %v (the response must be complete)", b, err)
			}
			want, code := "too big", 413
			if streamed {
				want, code = "partial answer", 200
			}
			if resp.StatusCode != code || string(b) != want {
				t.Fatalf("got %d %q", resp.StatusCode, b)
			}
			// The HCM announces the close, so clients do not reuse the
			// connection (ActiveStream::encodeHeaders).
			if !resp.Close { // ReadResponse takes the header out into Close
				t.Errorf("no connection: close in %v", resp.Header)
			}
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Errorf("after the response: %v, want the connection closed", err)
			}
		})
	}
}

// stream_idle_timeout before any response: 504 when the
// request is complete, 408 when not; a route idle_timeout overrides the
// HCM's for `route:` routes; the Process stream is cancelled.
func TestStreamIdleTimeoutBeforeResponse(t *testing.T) {
	holder := func(ps *procStream) error { <-ps.ctx.Done(); return nil }
	t.Run("request complete -> 504", func(t *testing.T) {
		p := startProcessor(t, holder)
		s := baseSettings()
		s.StreamIdleTimeout = 100 * time.Millisecond
		addr := startEmulator(t, s, p.addr)
		resp, err := h1Client(t).Get("http://" + addr + "/poll")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 504 || string(b) != "stream timeout" {
			t.Errorf("got %d %q, want 504 stream timeout", resp.StatusCode, b)
		}
		if !p.stream(t).cancelled() {
			t.Error("Process stream not cancelled after the timeout")
		}
	})
	t.Run("request incomplete -> 408", func(t *testing.T) {
		p := startProcessor(t, holder)
		s := baseSettings()
		s.StreamIdleTimeout = 100 * time.Millisecond
		addr := startEmulator(t, s, p.addr)
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write([]byte("some")) }()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/up", pr)
		resp, err := h2cClient(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 408 {
			t.Errorf("got %d, want 408", resp.StatusCode)
		}
	})
	t.Run("route idle_timeout overrides the HCM's", func(t *testing.T) {
		// HCM 100ms; the gRPC route says 1h. The gRPC call is held until
		// an HTTP request (HCM timeout, started later) has timed out, then
		// answered: it must not have timed out itself.
		httpTimedOut := make(chan struct{})
		p := startProcessor(t, func(ps *procStream) error {
			m := ps.next()
			if headerOf(t, m.GetRequestHeaders().GetHeaders(), "content-type") == nil {
				<-ps.ctx.Done() // the HTTP request: never answered
				return nil
			}
			ps.readUntilEOS()
			select {
			case <-httpTimedOut:
			case <-ps.ctx.Done():
				return nil
			}
			return ps.send(extproctest.Immediate(200, "held", u32(uint32(codes.AlreadyExists)), nil))
		})
		s := baseSettings()
		s.StreamIdleTimeout = 100 * time.Millisecond
		addr := startEmulator(t, s, p.addr)
		grpcErr := make(chan error, 1)
		go func() { grpcErr <- invoke(t, addr) }()
		p.stream(t) // the gRPC stream is open before the HTTP request starts
		resp, err := h1Client(t).Get("http://" + addr + "/poll")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 504 {
			t.Fatalf("HTTP request: %d, want 504 from the HCM timeout", resp.StatusCode)
		}
		close(httpTimedOut)
		if st := status.Convert(<-grpcErr); st.Code() != codes.AlreadyExists {
			t.Errorf("gRPC: %v, want the processor's answer (route idle_timeout 1h applies)", st.Err())
		}
	})
	t.Run("short route idle_timeout -> UNAVAILABLE", func(t *testing.T) {
		p := startProcessor(t, holder)
		s := baseSettings()
		s.Routes[0].IdleTimeout = 100 * time.Millisecond
		addr := startEmulator(t, s, p.addr)
		if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unavailable || st.Message() != "stream timeout" {
			t.Errorf("got %v %q, want UNAVAILABLE (504) stream timeout", st.Code(), st.Message())
		}
	})
}

// After response headers the idle timeout resets the stream; every
// response event (even an empty body_response: FilterManager::encodeData)
// re-arms it.
func TestStreamIdleTimeoutDuringStreamedResponse(t *testing.T) {
	t.Run("quiet stream is reset", func(t *testing.T) {
		p := startProcessor(t, func(ps *procStream) error {
			ps.readUntilEOS()
			_ = ps.send(extproctest.StreamedHeaders(false, ":status", "200", "content-type", "application/grpc"))
			_ = ps.send(extproctest.StreamedBody(frame(t, wrapperspb.String("first")), false))
			<-ps.ctx.Done()
			return nil
		})
		cs := watchStream(t, p, 150*time.Millisecond)
		var out wrapperspb.StringValue
		if err := cs.RecvMsg(&out); err != nil || out.GetValue() != "first" {
			t.Fatalf("first message %q %v", out.GetValue(), err)
		}
		err := cs.RecvMsg(&out)
		if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "RST_STREAM") {
			t.Errorf("after the idle timeout: %v, want a stream reset", err)
		}
		if !p.stream(t).cancelled() {
			t.Error("Process stream not cancelled")
		}
	})
	t.Run("activity keeps it alive", func(t *testing.T) {
		p := startProcessor(t, func(ps *procStream) error {
			ps.readUntilEOS()
			_ = ps.send(extproctest.StreamedHeaders(false, ":status", "200", "content-type", "application/grpc"))
			tick := time.NewTicker(30 * time.Millisecond)
			defer tick.Stop()
			for range 20 { // 600ms of keepalives against a 300ms idle timeout
				select {
				case <-tick.C:
				case <-ps.ctx.Done():
					return nil
				}
				if err := ps.send(extproctest.StreamedBody(nil, false)); err != nil {
					return err
				}
			}
			return ps.send(extproctest.StreamedTrailers("grpc-status", "0"))
		})
		cs := watchStream(t, p, 300*time.Millisecond)
		if err := cs.RecvMsg(&wrapperspb.StringValue{}); !errors.Is(err, io.EOF) {
			t.Errorf("got %v, want a clean end (keepalives reset the idle timer)", err)
		}
	})
}

// A client that goes away cancels the Process stream (never a
// half-close), on h2c and HTTP/1.1.
func TestClientDisconnectCancelsProcessStream(t *testing.T) {
	for _, proto := range []string{"h2c", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			// The script only holds the stream open; the test alone reads it
			// (a second reader would race the test for request_headers).
			p := startProcessor(t, func(ps *procStream) error {
				<-ps.ctx.Done()
				return nil
			})
			addr := startEmulator(t, baseSettings(), p.addr)
			client := h2cClient(t)
			if proto == "HTTP/1.1" {
				client = h1Client(t)
			}
			ctx, cancel := context.WithCancel(context.Background())
			pr, pw := io.Pipe()
			defer pw.Close()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/hold", pr)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			go func() { _, _ = pw.Write([]byte("x")) }()
			ps := p.stream(t)
			if ps.next() == nil {
				t.Fatal("no request_headers")
			}
			cancel()
			// net/http's HTTP/1 client waits for a blocked body read.
			pw.CloseWithError(errors.New("client gone"))
			<-done
			if !ps.cancelled() {
				t.Fatal("processor did not see its context cancelled")
			}
			if err := ps.recvEnd(); errors.Is(err, io.EOF) {
				t.Errorf("Process stream half-closed (%v); Envoy cancels it", err)
			}
		})
	}
}
