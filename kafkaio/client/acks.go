package client

import "strconv"

// Acks is how much acknowledgement a produce waits for (a route's `acks`).
type Acks int

const (
	// AcksNone is acks=0: the broker sends no answer, so success means the
	// record was handed to the broker (written to its connection), nothing
	// more; there is no offset.
	AcksNone Acks = iota
	// AcksLeader is acks=1: the partition leader wrote the record.
	AcksLeader
	// AcksAll is acks=all with the idempotent producer: every in-sync replica
	// has the record, and retries cannot duplicate or reorder it.
	AcksAll
)

func (a Acks) String() string {
	switch a {
	case AcksNone:
		return "none"
	case AcksLeader:
		return "leader"
	case AcksAll:
		return "all"
	}
	return "Acks(" + strconv.Itoa(int(a)) + ")"
}

// AcksFromName maps the acks names of the configuration (none, leader_only,
// in_sync_replicas) to a mode; anything else is the safest, all replicas.
func AcksFromName(name string) Acks {
	switch name {
	case "none":
		return AcksNone
	case "leader_only":
		return AcksLeader
	default:
		return AcksAll
	}
}
