package follow

import "github.com/confluentinc/confluent-kafka-go/v2/kafka"

// EachID calls fn with every distinct correlation id a record carries in
// the headers named names (one name per binding writing to the topic,
// usually one): a record whose headers all carry the same id is indexed
// once. id aliases the record's header value.
func EachID(hs []kafka.Header, names []string, fn func(id []byte)) {
	for i, name := range names {
		id, ok := headerBytes(hs, name)
		if !ok || (i > 0 && sameID(hs, names[:i], id)) {
			continue
		}
		fn(id)
	}
}

func headerBytes(hs []kafka.Header, name string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

// sameID tells whether one of the earlier header names carries id too.
func sameID(hs []kafka.Header, names []string, id []byte) bool {
	for _, n := range names {
		if v, ok := headerBytes(hs, n); ok && string(v) == string(id) {
			return true
		}
	}
	return false
}
