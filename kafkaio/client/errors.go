package client

import "errors"

// ErrUnknownTopic means the topic does not exist; requests never create topics.
var ErrUnknownTopic = errors.New("topic does not exist")

// ErrNotReady means a view or an index (replies, written ids) did not catch
// up before the caller's deadline.
var ErrNotReady = errors.New("not caught up yet")

// Readiness is where a client reports whether its warmed views are caught up.
type Readiness interface {
	Set(name string, ready bool, reason string)
}
