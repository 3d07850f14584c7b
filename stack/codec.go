package stack

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/bufpool"
)

// sendCodec is gRPC's proto codec with the messages the server sends
// marshalled into buffers of its own pool, which does not clear them
// (marshalling writes every byte). gRPC's codec takes them from its default
// pool, which clears each to its capacity: a gRPC fetch batch above 32 KiB
// cleared 1 MiB, 28 % of the server's CPU with 1,000 streams falling
// behind (BENCHMARKS.md). Receiving is gRPC's own.
type sendCodec struct {
	encoding.CodecV2 // gRPC's registered proto codec: Unmarshal and Name
	pool             *bufpool.Pool
}

func newSendCodec() *sendCodec {
	return &sendCodec{CodecV2: encoding.GetCodecV2(grpcproto.Name), pool: &bufpool.Pool{}}
}

// Marshal implements encoding.CodecV2.
func (c *sendCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v) // not a generated v2 message: gRPC's way
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("marshalling a %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		c.pool.Put(buf)
		return nil, fmt.Errorf("marshalling a %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}
