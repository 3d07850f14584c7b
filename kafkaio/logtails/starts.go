package logtails

import (
	"context"
	"fmt"
)

// LogStarts reads a topic's partition count and the first offset each
// partition still holds (its low watermark), from the broker: what a
// resume position is checked against, so that a client resuming after
// records retention deleted is told so rather than skipped past them.
func (l *Tails) LogStarts(ctx context.Context, topic string) ([]int64, error) {
	_, lo, _, err := l.watermarks(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("reading where topic %s starts: %w", topic, err)
	}
	return lo, nil
}
