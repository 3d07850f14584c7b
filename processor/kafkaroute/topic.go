package kafkaroute

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// The reasons a resolved topic is refused; a *TopicError wraps one.
var (
	ErrIllegalTopic  = errors.New("not a legal Kafka topic name")
	ErrInternalTopic = errors.New("an internal topic name")
	ErrTopicPattern  = errors.New("outside the route's topic-pattern")
)

// TopicError is a templated topic that resolved to a name the route may not
// use. Its text is the detail a binding answers with.
type TopicError struct {
	Topic, Pattern string
	Err            error // ErrIllegalTopic, ErrInternalTopic or ErrTopicPattern
}

func (e *TopicError) Error() string {
	switch e.Err {
	case ErrIllegalTopic:
		return fmt.Sprintf("topic %q is not a legal Kafka topic name (1 to 249 characters of A-Z a-z 0-9 . _ -, not . or ..)", e.Topic)
	case ErrInternalTopic:
		return fmt.Sprintf("topic %q is not allowed: names starting with '_' (or empty) are refused", e.Topic)
	}
	return fmt.Sprintf("topic %q does not match the route's topic-pattern %q", e.Topic, e.Pattern)
}

func (e *TopicError) Unwrap() error { return e.Err }

// Topic resolves the route's topic. A templated one is checked: a name
// outside the route's topic-pattern, an internal one, or one Kafka cannot
// have is a *TopicError. The last check comes first: librdkafka takes names
// as C strings, so an identity "secret\x00-public" would match the pattern
// *-public here and reach Kafka as "secret".
func Topic(w *config.With, resolve func(config.TemplatePart) string) (string, error) {
	topic := w.Topic.Expand(resolve)
	if w.Topic.Static() {
		return topic, nil
	}
	return topic, CheckTopic(topic, w.TopicPattern)
}

// CheckTopic checks a resolved topic name against a route's topic-pattern.
func CheckTopic(topic, pattern string) error {
	switch {
	case topic != "" && !config.LegalTopic(topic):
		return &TopicError{Topic: topic, Pattern: pattern, Err: ErrIllegalTopic}
	case topic == "" || strings.HasPrefix(topic, "_"):
		return &TopicError{Topic: topic, Pattern: pattern, Err: ErrInternalTopic}
	}
	if ok, err := path.Match(pattern, topic); err != nil || !ok {
		return &TopicError{Topic: topic, Pattern: pattern, Err: ErrTopicPattern}
	}
	return nil
}
