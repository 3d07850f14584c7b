package kafkagrpc

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// keyReused returns the refusal of a call whose idempotency key already
// names another request, or nil.
//
// The grpc-kafka binding derives a keyed call's correlation id from its
// key, its caller, service, method, reply-to and overrides: the same request
// repeated has the same correlation id, and its earlier reply is the
// answer (answered, by the reply index). A call with another correlation
// id under the same key's use is therefore another request, which that
// binding refuses before writing anything; the worker sees one only when
// two replicas wrote the two requests at the same instant, or when the
// producer's key index had evicted the key. It refuses it as that binding
// would, FAILED_PRECONDITION, rather than give it the first request's
// answer (a caller who reused a key by mistake must learn it) or call the
// service for it. Which of the two is first is what the cluster's key index
// read first. A key index that cannot be read in time leaves the call to
// be made (at least once).
func (w *Worker) keyReused(c *call) *status.Status {
	if c.keyUse == "" || w.opts.Keys == nil || c.ctx.Err() != nil {
		return nil
	}
	keys, err := w.opts.Keys()
	if err != nil {
		w.log.Warn("key index unavailable: the call is made without checking its idempotency key", "correlation_id", c.cid, "err", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, w.opts.KafkaTimeout)
	defer cancel()
	h := w.opts.Binding.Correlation
	if err := keys.Sync(ctx, c.part.topic, h.CorrelationID, h.Fingerprint()); err != nil {
		w.log.Warn("key index not caught up: the call is made without checking its idempotency key", "correlation_id", c.cid, "err", err)
		return nil
	}
	st := keys.LookupKey(c.part.topic, c.keyUse, c.cid)
	if !st.Written() || st.CID == c.cid {
		return nil
	}
	key := "its idempotency key"
	if c.keyName != "" {
		key = "idempotency key " + strconv.Quote(c.keyName)
	}
	return status.Newf(codes.FailedPrecondition,
		"%s was used at %s for another request to topic %q; this one differs in its service, method, reply-to or overrides. The service was not called: repeat the first request unchanged to get its answer, or send this one with a new idempotency key",
		key, st.First.UTC().Format(time.RFC3339), c.part.topic)
}
