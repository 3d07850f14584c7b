package client

import (
	"strings"
	"time"
)

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// ReplaceHeader returns hs without the headers named name (any case) and
// with name: value at the end; hs is not changed.
func ReplaceHeader(hs []Header, name string, value []byte) []Header {
	out := make([]Header, 0, len(hs)+1)
	for _, h := range hs {
		if !strings.EqualFold(h.Key, name) {
			out = append(out, h)
		}
	}
	return append(out, Header{Key: name, Value: value})
}

// Record is a record as read from Kafka.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte // nil = no key
	Value     []byte // nil = tombstone
	Headers   []Header
}
