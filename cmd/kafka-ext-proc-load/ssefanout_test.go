package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestSSEFanoutScenario runs sse-fanout briefly, as TestScenarios runs the
// others, so it cannot rot: both legs must deliver every record to every
// client (the scenario fails otherwise), resume with nothing missed, and
// report figures of the right shape.
func TestSSEFanoutScenario(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "split"}[split], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{"-scenario", "sse-fanout", "-json", "-sse-clients", "20", "-rate", "200", "-fanout-duration", "500ms",
				"-resumes", "3", "-register-timeout", "20s", "-timeout", "90s"}
			if split {
				args = append(args, "-split")
			}
			var out, errOut bytes.Buffer
			if code := run(ctx, args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
			}
			r := parseOutputs(t, out.Bytes()).of(t, scenarioSSEFanout)
			for _, leg := range []string{"grpc", "sse"} {
				if r.num(t, leg+"_clients") != 20 || r.num(t, leg+"_fanout_streams_complete") != 20 ||
					r.num(t, leg+"_fanout_delivered") != 2000 || r.num(t, leg+"_lag_samples") != 2000 ||
					r.num(t, leg+"_lag_p50_ms") <= 0 || r.num(t, leg+"_lag_p99_ms") > r.num(t, leg+"_lag_max_ms") ||
					r.num(t, leg+"_mem_goroutines_per_client") <= 0 || r.num(t, leg+"_all_per_record_cpu_us_per_req") <= 0 ||
					r.num(t, leg+"_resume_resumes") != 3 || r.num(t, leg+"_resume_first_p50_ms") <= 0 ||
					r.num(t, leg+"_resume_all_p50_ms") < r.num(t, leg+"_resume_first_p50_ms") ||
					r.num(t, leg+"_resume_cost_allocs_per_req") <= 0 {
					t.Errorf("%s leg: %v", leg, r)
				}
				if split != r.has(leg+"_server_mem_heap_bytes_per_client") || split != r.has(leg+"_server_per_record_allocs_per_req") {
					t.Errorf("%s leg (split %v): server figures of %v", leg, split, r)
				}
			}
			for _, q := range []string{"lag_p99_ratio", "cpu_per_record_ratio", "resume_first_ratio", "resume_cpu_ratio"} {
				if r.num(t, q) <= 0 {
					t.Errorf("%s: %v", q, r)
				}
			}
			// Memory per client of 20 is within the server's own noise
			// (a view's buffers come and go): only its presence is checked.
			if !r.has("heap_per_client_ratio") {
				t.Errorf("no heap_per_client_ratio: %v", r)
			}
		})
	}
}

// An SSE record's head survives the stamp and reads back; a gRPC
// message's reliability field is found after its value.
func TestSSERecordAndReliabilityField(t *testing.T) {
	v := sseValue(0x1234abcd, 100)
	stampSSE(v, 1_785_000_000_123_456_789)
	var head [recordHead]byte
	if len(v) != 100 || !readSSEValue(v, &head) {
		t.Fatalf("%q does not read back", v)
	}
	if seq, ns, ok := readRecord(head[:]); !ok || seq != 0x1234abcd || ns != 1_785_000_000_123_456_789 {
		t.Fatalf("read %d %d %v", seq, ns, ok)
	}
	for _, bad := range []string{"", "0000000000000001 0000000000000000000", "000000000000000g 0000000000000000000 ", "0000000000000001 00000000000000000x0 "} {
		if readSSEValue([]byte(bad), &head) {
			t.Errorf("%q reads", bad)
		}
	}
	msg := fanoutValue(7, 40)
	msg = protowire.AppendTag(msg, 32767, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte{1, 2, 3})
	if id, ok := reliabilityField(msg, 40); !ok || !bytes.Equal(id, []byte{1, 2, 3}) {
		t.Fatalf("reliability field %v %v", id, ok)
	}
	if _, ok := reliabilityField(msg, 39); ok {
		t.Fatal("read at the wrong offset")
	}
}
