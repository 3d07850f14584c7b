// Package produce holds the producers of a cluster, one per acks mode,
// and the outcomes of their produces.
package produce
