//go:build nodev

package main

import (
	"context"
	"errors"
	"io"
)

// dev in a production build: the embedded Kafka broker and the Envoy
// emulator are not linked in (-tags nodev), so there is nothing to start.
func dev(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("this binary was built with -tags nodev, without the embedded Kafka broker and the Envoy emulator; run `go run ./cmd/kafka-ext-proc dev` from a checkout")
}
