package kafkagrpc

import (
	"fmt"

	"google.golang.org/grpc/mem"
)

// rawCodec passes messages through as bytes: the worker has no
// descriptors, and a request record's value is already the message's
// protobuf encoding (docs/service-contract.md), which is what goes on the
// wire. Its name is "proto" so the call's content-type is
// application/grpc+proto, which every protobuf service accepts.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: marshalling a %T, want *[]byte", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: unmarshalling into a %T, want *[]byte", v)
	}
	*b = data.Materialize()
	return nil
}
