package processor

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// The one-allocation ImmediateResponse carries what a message built field by
// field does, within its room and beyond it (more headers, longer values),
// repeated names appended.
func TestImmediateHTTPHeaders(t *testing.T) {
	long := strings.Repeat("v", 100)
	for _, hs := range [][]route.Header{
		nil,
		{{Name: "content-type", Value: "application/json"}},
		{{Name: "content-type", Value: long}},
		{{Name: "content-type", Value: "application/json"}, {Name: "etag", Value: `"AAAAAAAAAAA.0.7"`}},
		{{Name: "content-type", Value: long}, {Name: "etag", Value: long}},
		{{Name: "set-cookie", Value: "a=1"}, {Name: "set-cookie", Value: "b=2"}, {Name: "x", Value: ""}},
		{{Name: "a", Value: "1"}, {Name: "b", Value: long}, {Name: "a", Value: "3"}, {Name: "c", Value: "4"}, {Name: "d", Value: "5"}},
	} {
		body := []byte(`{"id":1}`)
		want := &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_OK},
			Body:    body,
			Details: "kafka_ext_proc",
		}
		if len(hs) > 0 {
			want.Headers = &extprocv3.HeaderMutation{}
			for i, h := range hs {
				o := &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: h.Name, RawValue: []byte(h.Value)}}
				for _, prev := range hs[:i] {
					if prev.Name == h.Name {
						//nolint:staticcheck // SA1019: what Envoy reads (see fillMutation)
						o.Append = wrapperspb.Bool(true)
						break
					}
				}
				want.Headers.SetHeaders = append(want.Headers.SetHeaders, o)
			}
		}
		got := immediateHTTP(200, hs, body).GetImmediateResponse()
		if !proto.Equal(got, want) {
			t.Errorf("%d headers:\n got %v\nwant %v", len(hs), got, want)
		}
		if m := mutation(hs); !proto.Equal(m, want.Headers) {
			t.Errorf("mutation, %d headers:\n got %v\nwant %v", len(hs), m, want.Headers)
		}
	}
}

// immediateMsg is meant to cost no more bytes than the nine messages it
// replaces (768 B with two headers); a bigger envoy type would break that.
func TestImmediateMsgSize(t *testing.T) {
	if n := unsafe.Sizeof(immediateMsg{}); n > 768 {
		t.Fatalf("immediateMsg is %d bytes, more than the 768 of the messages built apart", n)
	}
}

// The answers' allocations stay in their size classes: an object of more
// than 512 B with pointers carries an 8-byte header of the runtime's, so
// immediateMsg takes the 768 B class only up to 760 B (else 896 B) and
// immediateMsg1 the 576 B class up to 568 B (else 640 B).
func TestImmediateMsgSizeClasses(t *testing.T) {
	for _, c := range []struct {
		name       string
		size, most uintptr
	}{
		{"immediateMsg", unsafe.Sizeof(immediateMsg{}), 768 - 8},
		{"immediateMsg1", unsafe.Sizeof(immediateMsg1{}), 576 - 8},
		{"immediateBase", unsafe.Sizeof(immediateBase{}), 288},
	} {
		if c.size > c.most {
			t.Errorf("%s is %d bytes, more than the %d of its size class", c.name, c.size, c.most)
		}
	}
}

func TestStatusLabel(t *testing.T) {
	for _, code := range []int{0, 99, 100, 200, 404, 599, 600, 1000, -1} {
		if got := statusLabel(code); got != strconv.Itoa(code) {
			t.Errorf("statusLabel(%d) = %q", code, got)
		}
	}
}

// definedStatus answers as the enum's name map does, for every code.
func TestDefinedStatus(t *testing.T) {
	for code := -1; code <= 1000; code++ {
		_, named := typev3.StatusCode_name[int32(code)]
		if want := named && code >= 200 && code <= 599; definedStatus(code) != want {
			t.Errorf("definedStatus(%d) = %v, want %v", code, !want, want)
		}
	}
}
