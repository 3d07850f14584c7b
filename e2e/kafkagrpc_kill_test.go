package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkagrpc"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// firstHangs is a service whose first call hangs until its caller goes
// away; the calls after it are echoed.
type firstHangs struct {
	example.UnimplementedEchoServer
	calls   atomic.Int32
	entered chan struct{}
}

func (s *firstHangs) Say(ctx context.Context, m *example.EchoMessage) (*example.EchoMessage, error) {
	n := s.calls.Add(1)
	s.entered <- struct{}{}
	if n == 1 {
		<-ctx.Done() // the worker was killed: its connection is gone
		return nil, ctx.Err()
	}
	return m, nil
}

// A kafka-grpc worker killed (kill -9) in the middle of a call: the next
// worker of the group calls the service again (at least once, as
// documented), the caller gets one answer, and the reply topic holds that
// call's reply once.
func TestKafkaGRPCWorkerKilledMidCall(t *testing.T) {
	// Serial: it runs a child process of this binary and kills it.
	e := startEnv(t, proxyOnly)
	svc := &firstHangs{entered: make(chan struct{}, 2)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	example.RegisterEchoServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	first := startWorkerChild(t, e.dev.Broker.Addr(), lis.Addr().String())
	ctx := ctxFor(t, 60*time.Second)
	answer := make(chan error, 1)
	go func() {
		got, err := example.NewEchoClient(e.grpcConn()).Say(ctx, &example.EchoMessage{Message: "killed mid-call"})
		if err == nil && got.GetMessage() != "killed mid-call" {
			err = fmt.Errorf("answer %q", got.GetMessage())
		}
		answer <- err
	}()
	<-svc.entered // the first worker's call is in the service
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	startWorkerChild(t, e.dev.Broker.Addr(), lis.Addr().String())
	if err := <-answer; err != nil {
		t.Fatalf("the call the killed worker was making: %v", err)
	}
	if n := svc.calls.Load(); n != 2 {
		t.Fatalf("the service was called %d times, want 2: once by the killed worker, once by the next", n)
	}
	var cid string
	for _, m := range e.readTopic("svc-requests") {
		cid, _ = recHeader(m, "gateway:correlation-id")
	}
	if n := len(recordsWith(e.readTopic("svc-responses"), "gateway:correlation-id", cid)); n != 2 {
		t.Fatalf("%d reply records, want the message and the end record once", n)
	}
	end := e.endOffsets("svc-requests")
	pollUntil(t, "the request offsets committed", func() bool { return committed(t, e, "svc-requests") == end })
}

// startWorkerChild runs a kafka-grpc worker in a child process (this test
// binary, TestKafkaGRPCWorkerChild) and returns once it holds partitions.
func startWorkerChild(t *testing.T, broker, service string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKafkaGRPCWorkerChild$", "-test.timeout", "5m")
	cmd.Env = append(os.Environ(), "KAFKA_EXT_PROC_KGRPC_CHILD="+broker+" "+service)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "KAFKA-GRPC READY" {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
		return cmd
	case <-time.After(60 * time.Second):
		t.Fatal("the child worker did not get partitions")
		return nil
	}
}

// TestKafkaGRPCWorkerChild is the child process of the kill -9 test: a
// kafka-grpc worker on the broker and service the environment names,
// until killed. Its session timeout is short, so that the group notices
// a killed worker within seconds.
func TestKafkaGRPCWorkerChild(t *testing.T) {
	t.Parallel()
	broker, service, ok := strings.Cut(os.Getenv("KAFKA_EXT_PROC_KGRPC_CHILD"), " ")
	if !ok {
		t.Skip("run by TestKafkaGRPCWorkerKilledMidCall")
	}
	cfg, err := config.Parse("kafka-grpc.yaml", []byte(kafkaGRPCConfig(service, "127.0.0.1:1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg = stack.PointAt(cfg, broker)
	cluster := *cfg.Kafka["kafka0"]
	cluster.Properties["session.timeout.ms"] = "6000"
	cluster.Properties["heartbeat.interval.ms"] = "500"
	w, err := kafkagrpc.Start(kafkagrpc.Options{Binding: cfg.KafkaGRPC[0], Cluster: &cluster, KafkaTimeout: 5 * time.Second,
		Silence: 20 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "partitions", func() bool { return w.Partitions() > 0 })
	fmt.Println("KAFKA-GRPC READY")
	<-context.Background().Done() // until SIGKILL
}
