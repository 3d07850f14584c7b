package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
)

// The service of examples/service-responder, against dev with the
// example's configuration, in what its README's grpcurl steps do not print:
// the first reply's meta:* headers are the response metadata, the end
// record's the trailers, and a streamed call gets a reply per message.
func TestServiceResponderExample(t *testing.T) {
	front, kafkaAddr := devRun(t, "--config", filepath.Join(repoRoot, "examples/service-responder/config.yaml"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if ready, err := exampleProgram(ctx, t, "./examples/service-responder", []string{"--brokers", kafkaAddr}); err != nil || ready != "ready\n" {
		t.Fatalf("the service: %q %v", ready, err)
	}
	cc, err := grpc.NewClient(front, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	echo := example.NewEchoClient(cc)

	var header, trailer metadata.MD
	resp, err := echo.Say(ctx, &example.EchoMessage{Message: "hello"}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil || resp.GetMessage() != "hello" || len(header.Get("x-served-by")) != 1 || header.Get("x-served-by")[0] != "service-responder" {
		t.Fatalf("Say hello: %v %v, response metadata %v", resp, err, header)
	}

	_, err = echo.Say(ctx, &example.EchoMessage{Message: "missing"}, grpc.Trailer(&trailer))
	if s := status.Convert(err); s.Code() != codes.NotFound || s.Message() != "nothing is called missing" {
		t.Fatalf("Say missing: %v, want NOT_FOUND with the service's message", s)
	}
	if v := trailer.Get("x-lookup"); len(v) != 1 || v[0] != "names" {
		t.Fatalf("Say missing: trailers %v, want x-lookup: names", trailer)
	}

	chat, err := echo.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"one", "one", "two"} { // a repeated message is answered twice
		if err := chat.Send(&example.EchoMessage{Message: m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := chat.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := chat.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("Chat: %v after %q", err, got)
			}
			break
		}
		got = append(got, m.GetMessage())
	}
	if len(got) != 3 || got[0] != "one" || got[1] != "one" || got[2] != "two" {
		t.Fatalf("Chat: %q, want one, one, two", got)
	}
}
