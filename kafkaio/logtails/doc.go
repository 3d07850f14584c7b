// Package logtails is what gRPC fetch streams read: a topic's history
// (from its view, or from leased history readers) and then a live ring fed
// by one tail consumer per cluster.
package logtails
