package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// shippedPingInterval is the HTTP/2 keepalive interval of envoy.yaml's
// processor cluster: what Envoy sends the processor.
func shippedPingInterval(t *testing.T) time.Duration {
	t.Helper()
	b, err := envoy.Load("../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() != "kafka_ext_proc" {
			continue
		}
		o := &upstreamhttpv3.HttpProtocolOptions{}
		if err := cl.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(o); err != nil {
			t.Fatal(err)
		}
		if iv := o.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive().GetInterval(); iv != nil {
			return iv.AsDuration()
		}
	}
	t.Fatal("envoy.yaml's kafka_ext_proc cluster sends no HTTP/2 keepalive")
	return 0
}

// startServer serves grpc.health.v1 with the processor's gRPC server options.
func startServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(stack.GRPCServerOptions(nil)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// pingOpenStream opens a Health/Watch stream that stays open (its request
// message is withheld, so the server writes nothing), sends n PINGs gap apart
// as Envoy's keepalive does, then sends the request and waits for the first
// response message on the stream. It returns an error if the server ends the
// connection or the stream on the way.
func pingOpenStream(ctx context.Context, addr string, gap time.Duration, n int) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dialing: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		return fmt.Errorf("writing the preface: %w", err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		return fmt.Errorf("writing SETTINGS: %w", err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Watch"},
		{":authority", "kafka-ext-proc"}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	const stream = 1
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return fmt.Errorf("writing HEADERS: %w", err)
	}

	// readUntil reads frames until done accepts one; the server ending the
	// connection or the stream is an error.
	readUntil := func(what string, done func(http2.Frame) bool) error {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				return fmt.Errorf("waiting for %s: GOAWAY %v %q", what, f.ErrCode, f.DebugData())
			case *http2.RSTStreamFrame:
				return fmt.Errorf("waiting for %s: RST_STREAM %v", what, f.ErrCode)
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if err := fr.WriteSettingsAck(); err != nil {
						return err
					}
				}
			}
			if done(f) {
				return nil
			}
		}
	}

	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		timer.Reset(gap)
		data := [8]byte{byte(i)}
		if err := fr.WritePing(false, data); err != nil {
			return fmt.Errorf("writing PING %d: %w", i, err)
		}
		if err := readUntil(fmt.Sprintf("PING %d's ack", i), func(f http2.Frame) bool {
			p, ok := f.(*http2.PingFrame)
			return ok && p.IsAck() && p.Data == data
		}); err != nil {
			return err
		}
	}
	// An empty HealthCheckRequest: the stream is still usable only if the
	// server answers it (a server-streaming call waits for the half-close).
	if err := fr.WriteData(stream, true, []byte{0, 0, 0, 0, 0}); err != nil {
		return fmt.Errorf("writing the request: %w", err)
	}
	return readUntil("the response", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == stream && len(d.Data()) > 0
	})
}

// Envoy's keepalive PINGs to the processor, at the interval envoy.yaml sets,
// do not end the connection or its ext_proc streams. grpc-go's default policy
// (5 minutes) would answer the third PING closer than that with a
// too_many_pings GOAWAY; four PINGs give it three chances.
func TestShippedKeepaliveKeepsStreams(t *testing.T) {
	t.Parallel()
	interval := shippedPingInterval(t)
	if interval < stack.KeepaliveMinTime {
		t.Fatalf("envoy.yaml pings every %s, below stack.KeepaliveMinTime %s", interval, stack.KeepaliveMinTime)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*interval+30*time.Second)
	defer cancel()
	if err := pingOpenStream(ctx, startServer(t), interval, 4); err != nil {
		t.Fatalf("PINGs every %s: %v", interval, err)
	}
}

// The same exchange with PINGs back to back is refused, so the test above
// would see a server that does not permit Envoy's interval.
func TestKeepaliveRejectsPingFlood(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := pingOpenStream(ctx, startServer(t), 0, 4)
	if err == nil || !strings.Contains(err.Error(), "too_many_pings") {
		t.Fatalf("back-to-back PINGs: %v, want a too_many_pings GOAWAY", err)
	}
}
