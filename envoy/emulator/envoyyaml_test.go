package emulator

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// The emulator accepts the shipped envoy/envoy.yaml, loaded the real way,
// and behaves as that file says: the HTTP route's direct_response, the gRPC
// route's placeholder cluster, status_on_error 504 (outcome unknown).
func TestShippedEnvoyYAML(t *testing.T) {
	b, err := envoy.Load("../envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := envoy.SettingsFrom(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(s); err != nil {
		t.Fatalf("the shipped envoy.yaml is not emulated: %v", err)
	}
	letThrough := startProcessor(t, func(ps *procStream) error { ps.next(); return nil })
	addr := startEmulator(t, s, letThrough.addr)
	if code, _, body := get(t, addr); code != 504 || body != "no answer from kafka-ext-proc\n" {
		t.Errorf("HTTP let through: %d %q, want envoy.yaml's direct_response", code, body)
	}
	if a := letThrough.stream(t).md.Get(":authority"); len(a) != 1 || a[0] != s.ExtProc.ClusterName {
		t.Errorf("Process :authority %q, want %q", a, s.ExtProc.ClusterName)
	}
	if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unavailable || st.Message() != "no healthy upstream" {
		t.Errorf("gRPC let through: %v", st.Err())
	}
	failing := startProcessor(t, func(ps *procStream) error { ps.next(); return status.Error(codes.Internal, "x") })
	addr = startEmulator(t, s, failing.addr)
	if code, _, body := get(t, addr); code != 504 || body != "" {
		t.Errorf("processor error: %d %q, want envoy.yaml's status_on_error 504 with no body", code, body)
	}
}
