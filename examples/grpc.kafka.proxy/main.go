// Command grpc.kafka.proxy is the gRPC service of the example: grpc-go's
// example Echo service (grpc.examples.echo.Echo, from the package
// google.golang.org/grpc/examples/features/proto/echo), served with
// nothing of kafka-ext-proc. The kafka-grpc binding of config.yaml calls it
// for the request records the grpc-kafka binding writes. It answers
//
//   - UnaryEcho: the message;
//   - ServerStreamingEcho: one response per word of the message;
//   - ClientStreamingEcho: the messages joined by spaces, once the client
//     half-closes;
//   - BidirectionalStreamingEcho: every message, as it comes.
//
// It prints "serving grpc.examples.echo.Echo on ADDRESS" once it listens.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"

	"google.golang.org/grpc"
	pb "google.golang.org/grpc/examples/features/proto/echo"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7152", "address to serve grpc.examples.echo.Echo on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *listen); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for gRPC on %s: %w", addr, err)
	}
	s := grpc.NewServer()
	pb.RegisterEchoServer(s, echoServer{})
	fmt.Printf("serving grpc.examples.echo.Echo on %s\n", lis.Addr())
	go func() {
		<-ctx.Done()
		s.GracefulStop()
	}()
	if err := s.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serving gRPC: %w", err)
	}
	return nil
}

type echoServer struct {
	pb.UnimplementedEchoServer
}

func (echoServer) UnaryEcho(_ context.Context, req *pb.EchoRequest) (*pb.EchoResponse, error) {
	return &pb.EchoResponse{Message: req.GetMessage()}, nil
}

func (echoServer) ServerStreamingEcho(req *pb.EchoRequest, stream grpc.ServerStreamingServer[pb.EchoResponse]) error {
	for _, word := range strings.Fields(req.GetMessage()) {
		if err := stream.Send(&pb.EchoResponse{Message: word}); err != nil {
			return err
		}
	}
	return nil
}

func (echoServer) ClientStreamingEcho(stream grpc.ClientStreamingServer[pb.EchoRequest, pb.EchoResponse]) error {
	var all []string
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&pb.EchoResponse{Message: strings.Join(all, " ")})
		}
		if err != nil {
			return err
		}
		all = append(all, req.GetMessage())
	}
}

func (echoServer) BidirectionalStreamingEcho(stream grpc.BidiStreamingServer[pb.EchoRequest, pb.EchoResponse]) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.EchoResponse{Message: req.GetMessage()}); err != nil {
			return err
		}
	}
}
