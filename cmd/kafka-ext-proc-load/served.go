package main

import (
	"fmt"
	"net"

	"google.golang.org/grpc"

	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// served is one of the load generator's own ext_proc servers (a baseline)
// on a free loopback port, with the processor's gRPC server options, so a
// baseline and the processor are served alike.
type served struct {
	srv  *grpc.Server
	lis  net.Listener
	done chan struct{}
}

// serve listens and serves what register adds; what names the server in
// errors.
func serve(what string, register func(grpc.ServiceRegistrar)) (served, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return served{}, fmt.Errorf("listening for the %s: %w", what, err)
	}
	s := served{srv: grpc.NewServer(stack.GRPCServerOptions(nil)...), lis: lis, done: make(chan struct{})}
	register(s.srv)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis) // returns nil after Stop
	}()
	return s, nil
}

func (s *served) addr() string { return s.lis.Addr().String() }

func (s *served) stop() {
	s.srv.Stop()
	<-s.done
}
