// Package writtenids remembers the correlation ids written to request
// topics, read back from the topics themselves, so a request with an
// idempotency key learns whether it was written before, on any replica.
package writtenids
