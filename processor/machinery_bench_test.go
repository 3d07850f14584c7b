package processor

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/cputime"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// machineryRequest is a POST with a small JSON body as Envoy sends it
// (request_headers with protocol_config and metadata_context, then the body
// in one chunk), the shape of the load generator's request-reply scenario.
func machineryRequest() (*extprocv3.ProcessingRequest, *extprocv3.ProcessingRequest) {
	body := []byte(`{"order":"o-1","items":[{"sku":"A-100","qty":2},{"sku":"B-200","qty":1}],"note":"machinery"}`)
	h := extproctest.RequestHeaders(false, ":authority", "gateway.local", ":path", "/orders/o-1", ":method", "POST", ":scheme", "http",
		"user-agent", "kafka-ext-proc-load", "accept", "*/*", "content-type", "application/json",
		"content-length", strconv.Itoa(len(body)), "x-forwarded-proto", "http", "x-request-id", "6f0c6d0e-2b0a-4a7e-9d4e-2f1f0d4c8a11")
	h.MetadataContext = &corev3.Metadata{}
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{
		RequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode: filterv3.ProcessingMode_NONE,
	}
	b := extproctest.RequestBody(body, true)
	b.MetadataContext = &corev3.Metadata{}
	return h, b
}

// machineryAnswer is the handler's answer: a 201 with a reply's body and
// its content type, as the demo responder's echo answers.
var machineryAnswer = &handler.HTTPResponse{
	Status:  201,
	Headers: []route.Header{{Name: "content-type", Value: "application/json"}},
	Body:    []byte(`{"method":"POST","path":"/orders/o-1","key":"o-1","body":{"order":"o-1","state":"accepted"}}`),
}

// bareServer is the hop baseline's ext_proc server: it reads the request to
// its end and replays a recorded answer, with nothing of the processor.
type bareServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	answer *extprocv3.ProcessingResponse
}

func (s *bareServer) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	m, err := stream.Recv()
	if err != nil {
		return nil
	}
	for eos := m.GetRequestHeaders().GetEndOfStream(); !eos; {
		if m, err = stream.Recv(); err != nil {
			return nil
		}
		eos = m.GetRequestBody().GetEndOfStream() || m.GetRequestTrailers() != nil
	}
	return stream.Send(s.answer)
}

// serveBench serves register on an in-memory connection and returns a client.
func serveBench(b *testing.B, register func(grpc.ServiceRegistrar)) extprocv3.ExternalProcessorClient {
	b.Helper()
	lis := bufconn.Listen(1 << 20)
	// Streams on reused workers whose stacks have grown, as the processor's
	// server runs them (stack.GRPCServerOptions): a goroutine per stream
	// would measure its stack growth instead.
	g := grpc.NewServer(grpc.NumStreamWorkers(4))
	register(g)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
	})
	return extprocv3.NewExternalProcessorClient(conn)
}

// roundTrip runs one request through client as Envoy does (headers, body,
// the answer, then the stream reset) and returns the answer. It returns
// errors rather than failing b: RunParallel's goroutines may not call
// b.Fatal.
func roundTrip(client extprocv3.ExternalProcessorClient, h, body *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := client.Process(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(h); err != nil {
		return nil, err
	}
	if err := s.Send(body); err != nil {
		return nil, err
	}
	return s.Recv()
}

// BenchmarkMachinery is the exchange machinery's own cost over the hop
// baseline's bare server, both on the same in-memory gRPC connection and
// client: "server" is the processor's Server whose handler returns a fixed
// answer (what the load generator's machinery baseline does without the
// Kafka work), "bare" replays the Server's answer to the same request.
// server − bare is what the exchange adds per request; cpu-ns/op counts
// the client's work too, the same on both.
func BenchmarkMachinery(b *testing.B) {
	h, body := machineryRequest()
	// The load generator's request-reply route: a path parameter, the
	// limits' default body size.
	cfg := &config.Config{Source: "bench", Bindings: []*config.Binding{{Name: "http0", Type: config.HTTPKafka, Routes: []*config.Route{
		{Index: 0, When: []config.Condition{{Method: "GET", Path: mustPath(b, "/items/{id}")}}, With: with(config.Fetch, "bench-items")},
		{Index: 1, When: []config.Condition{{Method: "POST", Path: mustPath(b, "/orders/{id}")}}, With: with(config.Produce, "bench-requests")},
	}}}}
	srv, err := New(Options{
		Config: cfg, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
		HTTP:   httpFunc(func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse { return machineryAnswer }),
		GRPC:   grpcFunc(echo),
	})
	if err != nil {
		b.Fatal(err)
	}
	server := serveBench(b, srv.Register)
	want, err := roundTrip(server, h, body)
	if err != nil {
		b.Fatal(err)
	}
	if want.GetImmediateResponse().GetStatus().GetCode() != 201 {
		b.Fatalf("the server answered %v, want a 201 ImmediateResponse", want)
	}
	bare := serveBench(b, func(g grpc.ServiceRegistrar) {
		extprocv3.RegisterExternalProcessorServer(g, &bareServer{answer: want})
	})
	for _, bc := range []struct {
		name   string
		client extprocv3.ExternalProcessorClient
	}{{"server", server}, {"bare", bare}} {
		b.Run(bc.name, func(b *testing.B) {
			if got, err := roundTrip(bc.client, h, body); err != nil || !proto.Equal(got, want) {
				b.Fatalf("%s answered %v (%v), want %v", bc.name, got, err, want)
			}
			b.ReportAllocs()
			cpu := cputime.Process()
			for b.Loop() {
				if _, err := roundTrip(bc.client, h, body); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time moves less than wall time on a shared machine.
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
		// 64 in flight, as the load generator's request-reply scenario runs.
		b.Run(bc.name+"-64", func(b *testing.B) {
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			cpu := cputime.Process()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := roundTrip(bc.client, h, body); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
	waitIdle(b, srv)
}
