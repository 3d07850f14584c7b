package kafkaroute

import (
	"errors"

	"github.com/google/uuid"
)

// MaxIdempotencyKey bounds an idempotency key: it starts the correlation id,
// which travels in record headers and in async locations.
const MaxIdempotencyKey = 128

// Why an idempotency key is refused.
var (
	ErrRepeatedKey  = errors.New("more than one idempotency key")
	ErrMalformedKey = errors.New("malformed idempotency key")
)

// IdempotencyKey reads the values of the idempotency header (or metadata):
// none gets a generated UUID that stands for it (given false); more than one
// is ErrRepeatedKey; one that is not ValidIdempotencyKey is ErrMalformedKey.
func IdempotencyKey(values []string) (key string, given bool, err error) {
	switch {
	case len(values) == 0:
		return uuid.NewString(), false, nil
	case len(values) > 1:
		return "", false, ErrRepeatedKey
	case !ValidIdempotencyKey(values[0]):
		return "", false, ErrMalformedKey
	}
	return values[0], true, nil
}

// ValidIdempotencyKey: 1–128 characters of [A-Za-z0-9._~-] (URL-unreserved,
// so a correlation id is safe in a location without escaping).
func ValidIdempotencyKey(k string) bool {
	if k == "" || len(k) > MaxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-') {
			return false
		}
	}
	return true
}
