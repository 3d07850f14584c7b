package emulator

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

// Several endpoints in the ext_proc cluster: each request's Process stream
// goes to the next one in turn, as Envoy's round robin does.
func TestRoundRobinEndpoints(t *testing.T) {
	const n = 3
	var conns []grpc.ClientConnInterface
	for i := range n {
		name := fmt.Sprintf("replica-%d", i)
		p := startProcessor(t, func(ps *procStream) error {
			ps.next()
			return ps.send(extproctest.Immediate(200, name, nil, nil))
		})
		c, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns = append(conns, c)
	}
	e, err := New(Options{Settings: baseSettings(), Processors: conns, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveEmulator(t, e)

	var got []string
	for range 2 * n {
		resp, err := h1Client(t).Get("http://" + addr + "/items")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = append(got, string(b))
	}
	seen := map[string]int{}
	for i, g := range got {
		seen[g]++
		if i >= n && g != got[i-n] {
			t.Fatalf("answers %v: not one endpoint after the other", got)
		}
	}
	if len(seen) != n {
		t.Fatalf("answers %v: want each of the %d endpoints twice", got, n)
	}
}
