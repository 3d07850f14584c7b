// Package views keeps views of compacted topics (the current record per
// key), read by one live consumer per cluster after a catch-up of their
// own, and what fetch routes hold of them.
package views
