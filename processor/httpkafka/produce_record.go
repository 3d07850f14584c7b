package httpkafka

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strings"
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/timerpool"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httphdr"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// deniedRequestHeader reports request headers never written to a request
// record: what the connection or Envoy owns, credentials, and preferences
// meant for us.
func deniedRequestHeader(name string) bool {
	switch name {
	case "content-length", "prefer", "authorization", "cookie", "proxy-authorization",
		"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer":
		return true
	}
	return strings.HasPrefix(name, "x-envoy-")
}

// ifMatchForward reduces an if-match value to the record parts of its
// entity tags: a fetch ETag is "<offsets>/<record etag>", and the responder
// knows its records' etag headers, not our offsets. Tags without a record
// part (and `*`) say nothing the responder can check and are dropped;
// several record parts are joined as a list.
func ifMatchForward(v string) (string, bool) {
	tags := httphdr.ParseIfNoneMatch([]string{v}).Tags
	var parts []string
	for _, t := range tags {
		if _, rec, ok := strings.Cut(t, "/"); ok && rec != "" {
			parts = append(parts, rec)
		}
	}
	if len(parts) == 0 {
		return "", false
	}
	return strings.Join(parts, ", "), true
}

// cidHashLen is the number of hex digits after "<idempotency key>-": the
// first half hashes the request, the second the caller's identity.
const cidHashLen = 32

// correlation accumulates the correlation id of a request
// (docs/design.md#http-kafka-produce):
//
//	<idempotency key or UUID>-<hex md5 of the request, 8 bytes><hex md5 of the identity, 8 bytes>
//
// The request half covers the key, every forwarded header except the
// volatile ones, the guard identities, reply-to, the overrides and the
// body, each length-prefixed so field boundaries cannot shift. A replay
// through Envoy therefore gets the same id, and two callers (different
// identities) never share one. The identity half lets a follow-up, which
// knows nothing of the original request, check that it comes from the same
// caller without any state: it recomputes that half from its own verified
// identity (appendIdentityTag). Responders need not know the layout: they copy
// the id.
type correlation struct {
	h   hash.Hash
	buf []byte // one field at a time: length prefix and string bytes
	arr [128]byte
}

func newCorrelation() *correlation {
	c := &correlation{h: md5.New()}
	c.buf = c.arr[:0]
	return c
}

// producePools keep what every request-reply produce needs for a moment
// only, so a round trip does not allocate it: the correlation id's hash
// and the reply wait's timer.
type producePools struct {
	correlations sync.Pool // *correlation
	timers       timerpool.Pool
}

// correlation is newCorrelation, reused.
func (p *producePools) correlation() *correlation {
	if c, ok := p.correlations.Get().(*correlation); ok {
		c.h.Reset()
		c.buf = c.arr[:0]
		return c
	}
	return newCorrelation()
}

// putCorrelation gives c back; nothing may use it after.
func (p *producePools) putCorrelation(c *correlation) { p.correlations.Put(c) }

func (c *correlation) field(b []byte) {
	c.buf = binary.AppendUvarint(c.buf[:0], uint64(len(b)))
	c.h.Write(c.buf)
	c.h.Write(b)
}

// str is field for a string, copied into buf rather than converted: the
// hash is an interface, so a conversion would allocate for every field.
func (c *correlation) str(s string) {
	c.buf = binary.AppendUvarint(c.buf[:0], uint64(len(s)))
	c.buf = append(c.buf, s...)
	c.h.Write(c.buf)
}

// identities hashes the guard identities in guard-name order.
func (c *correlation) identities(ids map[string]route.Identity) {
	var few [4]string
	names := few[:0]
	for g := range ids {
		names = append(names, g)
	}
	slices.Sort(names)
	c.field(nil) // marks the identity section even when there is none
	for _, g := range names {
		c.str(g)
		c.str(ids[g].Subject)
	}
}

// sum8 appends the hex of the first 8 bytes of the hash to dst.
func (c *correlation) sum8(dst []byte) []byte {
	c.buf = c.h.Sum(c.buf[:0])
	return hex.AppendEncode(dst, c.buf[:8])
}

func (c *correlation) id(prefix string, ids map[string]route.Identity) string {
	return string(c.idBytes(prefix, ids))
}

// idBytes is id as bytes of their own, for a record header that carries it.
func (c *correlation) idBytes(prefix string, ids map[string]route.Identity) []byte {
	b := make([]byte, 0, len(prefix)+1+cidHashLen)
	b = append(b, prefix...)
	b = append(b, '-')
	b = c.sum8(b)
	return appendIdentityTag(b, ids)
}

// appendIdentityTag appends the identity half of a correlation id: 16 hex
// digits.
func appendIdentityTag(dst []byte, ids map[string]route.Identity) []byte {
	if len(ids) == 0 {
		return append(dst, anonymousTag[:]...)
	}
	return appendIdentityTagOf(dst, ids)
}

// anonymousTag is the identity half of every request without a guard
// identity, computed once (it is a constant) rather than hashed per request.
var anonymousTag = func() (tag [cidHashLen / 2]byte) {
	appendIdentityTagOf(tag[:0], nil)
	return tag
}()

func appendIdentityTagOf(dst []byte, ids map[string]route.Identity) []byte {
	c := newCorrelation()
	c.str("kafka-ext-proc identity")
	c.identities(ids)
	return c.sum8(dst)
}

// followUpAllowed checks that cid is shaped as we issue them and was issued
// to the caller with these identities.
func followUpAllowed(cid string, ids map[string]route.Identity) bool {
	i := len(cid) - cidHashLen - 1
	if i < 1 || cid[i] != '-' || !kafkaroute.ValidIdempotencyKey(cid[:i]) {
		return false
	}
	for _, c := range []byte(cid[i+1:]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	var tag [cidHashLen / 2]byte
	return cid[len(cid)-cidHashLen/2:] == string(appendIdentityTag(tag[:0], ids))
}

// requestHeaders builds the headers of a request record with a reply-to
// (docs/design.md#http-kafka-produce): the request headers minus the deny-list
// (credentials and Envoy's internals), with if-match reduced to its record
// part, then reply-to, the overrides and the correlation id (appended by the
// caller once computed). Request headers named like one the binding injects are
// dropped so a client cannot forge them. It feeds the correlation hash as it
// goes.
func requestHeaders(c *correlation, in route.Headers, ids map[string]route.Identity,
	replyToName, replyTo, cidName, fpName string, overrides []client.Header) []client.Header {
	out := make([]client.Header, 0, len(in)+len(overrides)+2)
	// The values are copied into one buffer rather than one allocation
	// each; every value is a capped slice of it, so a later append cannot
	// reach into an earlier value (if-match, reduced, only ever shrinks, and
	// a value past the estimate lands in a new buffer, which is as correct).
	n := len(replyTo)
	for _, h := range in {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	value := func(v string) []byte {
		start := len(buf)
		buf = append(buf, v...)
		return buf[start:len(buf):len(buf)]
	}
	injected := func(name string) bool {
		if name == replyToName || name == cidName || name == fpName {
			return true
		}
		for _, o := range overrides {
			if o.Key == name {
				return true
			}
		}
		return false
	}
	for _, h := range in {
		if deniedRequestHeader(h.Name) || injected(h.Name) {
			continue
		}
		v := h.Value
		if h.Name == "if-match" {
			var ok bool
			if v, ok = ifMatchForward(v); !ok {
				continue
			}
		}
		out = append(out, client.Header{Key: h.Name, Value: value(v)})
		if !kafkaroute.VolatileHeader(h.Name) {
			c.str(h.Name)
			c.str(v)
		}
	}
	c.identities(ids)
	out = append(out, client.Header{Key: replyToName, Value: value(replyTo)})
	c.str(replyToName)
	c.str(replyTo)
	for _, o := range overrides {
		out = append(out, o)
		c.str(o.Key)
		c.field(o.Value)
	}
	return out
}

// onewayCorrelation is the correlation id of a oneway request with an
// idempotency key, laid out as a request-reply one: the request half hashes
// what the record is made of (topic, key, tombstone or value, content-type,
// overrides) and the identities, so a retry through Envoy gets the same id
// and the same key on another request does not.
func onewayCorrelation(idem string, req *handler.HTTPRequest, rec *client.Record, ct string, overrides []client.Header) string {
	c := newCorrelation()
	c.str(rec.Topic)
	c.field(rec.Key)
	if rec.Value == nil {
		c.str("tombstone")
	} else {
		c.str("value")
		c.field(rec.Value)
	}
	c.str(ct)
	for _, o := range overrides {
		c.str(o.Key)
		c.field(o.Value)
	}
	c.identities(req.Match.Identities)
	return c.id(idem, req.Match.Identities)
}
