package client

import (
	"context"
	"log/slog"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ForwardLogs turns the log events of one librdkafka instance
// (go.logs.channel.enable, set by Config) into slog records until stop is
// closed or the channel closes.
func ForwardLogs(logger *slog.Logger, logs <-chan kafka.LogEvent, role string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case ev, ok := <-logs:
			if !ok {
				return
			}
			level := slog.LevelDebug
			switch {
			case ev.Level <= 3:
				level = slog.LevelError
			case ev.Level == 4:
				level = slog.LevelWarn
			}
			logger.Log(context.Background(), level, ev.Message, "librdkafka", ev.Tag, "role", role)
		}
	}
}
