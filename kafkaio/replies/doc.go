// Package replies is the reply index of a cluster: the reply records of
// every reply-to topic by correlation id, read from now - retention by a
// follow.Follower, and the watches request-reply exchanges wait on. An id
// evicted for the index's bound keeps where its records lie and is read
// back from its topic, by a consumer of its own, when a watch asks for it
// (evicted.go, readback.go).
package replies
