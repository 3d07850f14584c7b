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

// NewLogTailConsumer is NewConsumer for the log tails' consumer
// (LogTailConfig).
func NewLogTailConsumer(binding string, props map[string]string, kafkaTimeout time.Duration, groupID string) (*kafka.Consumer, *kafka.AdminClient, error) {
	return newConsumer(LogTailConfig(props, kafkaTimeout, groupID), binding, "log tail consumer")
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

// Logger is the logger of a kafka binding's clients (slog's default
// when nil), naming the binding on every line.
func Logger(logger *slog.Logger, binding string) *slog.Logger {
	if logger == nil {
		logger = slog.Default()
	}
	return logger.With("kafka", binding)
}
