// Package replies is the reply index of a cluster: the reply records of
// every reply-to topic by correlation id, read from now - retention by a
// follow.Follower, and the watches request-reply exchanges wait on.
package replies
