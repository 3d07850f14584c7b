// Package follow reads topics the way the indexes of a cluster do: a
// Follower is one assign-only consumer reading a set of topics from offsets
// its reader chose, with per-partition positions, a catch-up signal and
// partitions added to a topic assigned as they appear. The helpers beside
// it (partition counts, offsets by time, the periodic partition check) serve
// the views and the log tails too.
package follow
