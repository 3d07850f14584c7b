package e2e_test

import (
	"fmt"

	"google.golang.org/grpc/mem"
)

// rawMessage is a gRPC message of given bytes, for calls to methods whose
// protos the tests do not need.
type rawMessage struct{ b []byte }

// rawCodec sends and receives rawMessage bytes as they are.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("rawCodec cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("rawCodec cannot unmarshal into %T", v)
	}
	m.b = data.Materialize()
	return nil
}
