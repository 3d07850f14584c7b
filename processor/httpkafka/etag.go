package httpkafka

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// Entity tags of fetch answers are built from the offsets of the records
// that make up the answer, and nothing else, so that
//   - they change only when the answer changes (a write to a key the route
//     does not select leaves them alone: no false wake-ups),
//   - every replica that consumed the same records computes the same tag,
//   - a recreated topic never matches (the topic id is part of the tag),
//   - a replica can tell that a tag is ahead of it (the tag carries, per
//     partition, the highest offset in the answer) and wait instead of
//     answering with older data.
//
// Single record: <topic>.<partition>.<offset>[/<record etag header>]
// Merged:        <topic>.m<hash of every (partition, offset)>.<p>:<max offset>,...
// where <topic> is the first 8 bytes of the topic id in unpadded base64url.
// The opaque tag is sent quoted (a strong ETag).

func topicTag(v *views.View) string {
	var b [topicTagLen]byte
	return string(appendTopicTag(b[:0], v))
}

// topicTagLen is the length of a topic tag: 8 bytes in unpadded base64.
const topicTagLen = 11

func appendTopicTag(dst []byte, v *views.View) []byte {
	id := v.TopicID()
	return base64.RawURLEncoding.AppendEncode(dst, id[:8])
}

func singleTag(v *views.View, e *views.Entry, recordTag string) string {
	q := quotedSingleTag(v, e, recordTag)
	return q[1 : len(q)-1]
}

// quotedSingleTag is singleTag as the etag header sends it, in quotes; the
// tag itself is the string inside them, so an answer needs one allocation
// for both.
func quotedSingleTag(v *views.View, e *views.Entry, recordTag string) string {
	// One allocation, the string: the bytes are built on the stack.
	var buf [64]byte
	b := append(buf[:0], '"')
	b = appendTopicTag(b, v)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(e.Partition), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, e.Offset, 10)
	if recordTag != "" {
		b = append(b, '/')
		b = append(b, recordTag...)
	}
	b = append(b, '"')
	return string(b)
}

// mergedTag hashes the (partition, offset) of the entries, which must be in
// (partition, offset) order.
func mergedTag(v *views.View, entries []views.Entry) string {
	h := fnv.New64a()
	var buf [12]byte
	var maxOff []int64 // per partition, -1 = none
	for _, e := range entries {
		binary.BigEndian.PutUint32(buf[:4], uint32(e.Partition))
		binary.BigEndian.PutUint64(buf[4:], uint64(e.Offset))
		h.Write(buf[:])
		for int(e.Partition) >= len(maxOff) {
			maxOff = append(maxOff, -1)
		}
		if e.Offset > maxOff[e.Partition] {
			maxOff[e.Partition] = e.Offset
		}
	}
	var b strings.Builder
	b.WriteString(topicTag(v))
	b.WriteString(".m")
	b.WriteString(base64.RawURLEncoding.EncodeToString(h.Sum(nil)))
	b.WriteByte('.')
	first := true
	for p, o := range maxOff {
		if o < 0 {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(strconv.Itoa(p))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(o, 10))
	}
	return b.String()
}

// tagOffsets returns the per-partition offsets a tag of ours names for
// the view's topic: the highest offset per partition it reflects. ok is
// false for tags that are not ours or name another topic.
func tagOffsets(v *views.View, tag string) (offsets map[int32]int64, ok bool) {
	var prefix [topicTagLen + 1]byte
	appendTopicTag(prefix[:0], v)
	prefix[topicTagLen] = '.'
	if len(tag) < len(prefix) || tag[:len(prefix)] != string(prefix[:]) {
		return nil, false
	}
	rest := tag[len(prefix):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	if strings.HasPrefix(rest, "m") {
		_, list, found := strings.Cut(rest, ".")
		if !found {
			return nil, false
		}
		offsets = map[int32]int64{}
		if list == "" {
			return offsets, true
		}
		for list != "" {
			var item string
			item, list, _ = strings.Cut(list, ",")
			ps, os, found := strings.Cut(item, ":")
			p, err1 := strconv.ParseInt(ps, 10, 32)
			o, err2 := strconv.ParseInt(os, 10, 64)
			if !found || err1 != nil || err2 != nil {
				return nil, false
			}
			offsets[int32(p)] = o
		}
		return offsets, true
	}
	ps, os, found := strings.Cut(rest, ".")
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if !found || err1 != nil || err2 != nil {
		return nil, false
	}
	return map[int32]int64{int32(p): o}, true
}

// behind reports whether the view has not yet read every offset the tag
// names: answering now could send data older than what the client has.
func behind(v *views.View, offsets map[int32]int64) bool {
	for p, o := range offsets {
		if pos := v.Position(p); pos >= 0 && pos <= o {
			return true
		}
	}
	return false
}
