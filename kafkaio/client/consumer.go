package client

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// NewConsumer creates one of a cluster's long-lived assignment-only
// consumers (the views' live consumer, the reply index's, the written-id index's)
// in its own group, and the admin handle that shares its connections for
// metadata and partition checks. what names the consumer in errors.
func NewConsumer(binding string, props map[string]string, kafkaTimeout time.Duration, groupID, what string) (*kafka.Consumer, *kafka.AdminClient, error) {
	return newConsumer(ConsumerConfig(props, kafkaTimeout, groupID), binding, what)
}

// NewLogTailConsumer creates the log tails' consumer (LogTailConfig). It has
// no admin handle: the tails' look-ups go through a look-up client of their
// own (NewLookupClient), which no fetch held by the broker delays.
func NewLogTailConsumer(binding string, props map[string]string, kafkaTimeout time.Duration, groupID string) (*kafka.Consumer, error) {
	cons, err := kafka.NewConsumer(LogTailConfig(props, kafkaTimeout, groupID))
	if err != nil {
		return nil, fmt.Errorf("creating the log tail consumer of kafka binding %q: %w", binding, err)
	}
	return cons, nil
}

func newConsumer(cm *kafka.ConfigMap, binding, what string) (*kafka.Consumer, *kafka.AdminClient, error) {
	cons, err := kafka.NewConsumer(cm)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the %s of kafka binding %q: %w", what, binding, err)
	}
	admin, err := kafka.NewAdminClientFromConsumer(cons)
	if err != nil {
		_ = cons.Close()
		return nil, nil, fmt.Errorf("creating the admin handle of the %s of kafka binding %q: %w", what, binding, err)
	}
	return cons, admin, nil
}

// NewLookupClient creates a client that only looks things up (metadata,
// offsets; LookupConfig) and its admin handle. A consumer's admin handle
// shares the consumer's connections, where a ListOffsets waits behind the
// fetch the broker holds open (fetch.wait.max.ms): look-ups someone waits
// for go through a client of their own. what names its user in errors.
func NewLookupClient(binding string, props map[string]string, kafkaTimeout time.Duration, what string) (*kafka.Producer, *kafka.AdminClient, error) {
	p, err := kafka.NewProducer(LookupConfig(props, kafkaTimeout))
	if err != nil {
		return nil, nil, fmt.Errorf("creating the look-up client of the %s of kafka binding %q: %w", what, binding, err)
	}
	admin, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("creating the look-up client of the %s of kafka binding %q: %w", what, binding, err)
	}
	// Its events are errors its logs also say; unread, they would fill the
	// channel. The range ends when Close closes it.
	go func() {
		for range p.Events() {
		}
	}()
	return p, admin, nil
}

// Logger is the logger of a kafka binding's clients (slog's default
// when nil), naming the binding on every line.
func Logger(logger *slog.Logger, binding string) *slog.Logger {
	if logger == nil {
		logger = slog.Default()
	}
	return logger.With("kafka", binding)
}
