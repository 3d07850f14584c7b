package ssekafka

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// eventStream is the only media type an sse-kafka route answers.
const eventStream = "text/event-stream"

// acceptsEventStream reports whether accept names text/event-stream with a
// non-zero weight. A wildcard (*/*, text/*) or no accept at all is not
// enough: the answer is a stream that never ends, so it goes only to a
// client that asked for one by name, as EventSource does; a link followed
// or a fetch() without it is told why (406) instead of hanging.
func acceptsEventStream(h route.Headers) bool {
	for _, v := range h.Values("accept") {
		for _, r := range strings.Split(v, ",") {
			mt, params, _ := strings.Cut(r, ";")
			if !strings.EqualFold(strings.TrimSpace(mt), eventStream) {
				continue
			}
			if q, ok := weight(params); !ok || q > 0 {
				return true
			}
		}
	}
	return false
}

// weight reads the q parameter of a media range's parameters; ok is false
// when there is none.
func weight(params string) (q float64, ok bool) {
	for _, p := range strings.Split(params, ";") {
		k, v, found := strings.Cut(strings.TrimSpace(p), "=")
		if found && strings.EqualFold(k, "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return q, err == nil
		}
	}
	return 0, false
}

func notAcceptable(h route.Headers) *handler.HTTPResponse {
	got := "no accept header"
	if vs := h.Values("accept"); len(vs) > 0 {
		got = fmt.Sprintf("accept %q", strings.Join(vs, ", "))
	}
	return handler.ProblemResponse(http.StatusNotAcceptable, fmt.Sprintf(
		"this route answers a Server-Sent Events stream, which never ends: send accept: %s (EventSource does); the request has %s",
		eventStream, got))
}

// maxLastEventID bounds the last-event-id header: an id names every
// partition of the topic, at most about 8 bytes of base64 each, so this
// takes a topic of some 2,000 partitions and refuses a hostile header
// before it is decoded.
const maxLastEventID = 16 << 10

// lastEventID reads the resume position from last-event-id: nil without
// one; a problem (400) when it is repeated, too long or not an id this
// gateway (or the reference implementation) issued.
func lastEventID(h route.Headers) (map[int32]int64, *handler.HTTPResponse) {
	vs := h.Values("last-event-id")
	switch {
	case len(vs) == 0:
		return nil, nil
	case len(vs) > 1:
		return nil, handler.ProblemResponse(http.StatusBadRequest, fmt.Sprintf(
			"last-event-id is sent %d times; send it once, with the id of the last event received", len(vs)))
	}
	v := strings.TrimSpace(vs[0])
	switch {
	case v == "":
		return nil, nil // EventSource before any event: start afresh
	case len(v) > maxLastEventID:
		return nil, handler.ProblemResponse(http.StatusBadRequest, fmt.Sprintf(
			"last-event-id is %d bytes long, more than the %d an event id of this gateway can be; send the id of the last event received", len(v), maxLastEventID))
	}
	start, err := grpcwire.ParseMessageID(v)
	if err != nil {
		return nil, handler.ProblemResponse(http.StatusBadRequest, fmt.Sprintf(
			"last-event-id is not an event id this gateway issued (%v); send the id of the last event received, or none to start afresh", err))
	}
	return start, nil
}
