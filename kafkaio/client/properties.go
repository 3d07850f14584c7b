package client

import (
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// DefaultClientID is the client.id of every client unless the binding sets
// one: kafka-ext-proc-<host>, so brokers' logs and quotas can tell the
// processor's replicas apart from other clients.
func DefaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "kafka-ext-proc"
	}
	return "kafka-ext-proc-" + host
}

// PropertyError is a property librdkafka refuses, in librdkafka's words.
// Property is "" when the message names none of the binding's properties.
type PropertyError struct {
	Property string
	Msg      string
}

// CheckProperties has librdkafka read a binding's properties exactly as the
// processor's producers and consumers will (with the settings the processor
// adds), without connecting: bootstrap.servers is left out, so the clients
// created have no broker to reach and are closed at once. It returns every
// property librdkafka refuses, a name or value it does not know, or a file
// it cannot read.
func CheckProperties(props map[string]string) []PropertyError {
	rest := make(map[string]string, len(props))
	for k, v := range props {
		if k != "bootstrap.servers" && k != "metadata.broker.list" {
			rest[k] = v
		}
	}
	var errs []PropertyError
	seen := map[string]bool{}
	// librdkafka stops at the first refused property: take it out and try
	// again, so one run reports them all.
	for _, create := range []func(map[string]string) error{newCheckProducer, newCheckConsumer} {
		for {
			err := create(rest)
			if err == nil {
				break
			}
			name := refusedProperty(err.Error(), rest, create)
			if !seen[name] {
				seen[name] = true
				errs = append(errs, PropertyError{Property: name, Msg: err.Error()})
			}
			if name == "" {
				break
			}
			delete(rest, name)
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Property < errs[j].Property })
	return errs
}

func newCheckProducer(props map[string]string) error {
	p, err := kafka.NewProducer(WithoutStatistics(Config(props, 0)))
	if err == nil {
		p.Close()
	}
	return err
}

func newCheckConsumer(props map[string]string) error {
	c, err := kafka.NewConsumer(WithoutStatistics(ConsumerConfig(props, 0, "kafka-ext-proc-validate")))
	if err == nil {
		_ = c.Close()
	}
	return err
}

// quotedProperty finds the property librdkafka names in its messages:
// `Invalid value "soon" for configuration property "linger.ms"`,
// `No such configuration property: "lingr.ms"`.
var quotedProperty = regexp.MustCompile(`property:? "([^"]+)"`)

// refusedProperty is the property an error is about: the one librdkafka
// quotes; when it quotes another name for it (linger.ms is reported as
// queue.buffering.max.ms), the one that alone gives the same error; else the
// longest of the given names the message mentions.
func refusedProperty(msg string, props map[string]string, create func(map[string]string) error) string {
	if m := quotedProperty.FindStringSubmatch(msg); m != nil {
		if _, ok := props[m[1]]; ok {
			return m[1]
		}
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if err := create(map[string]string{k: props[k]}); err != nil && err.Error() == msg {
				return k
			}
		}
	}
	best := ""
	for k := range props {
		if len(k) > len(best) && strings.Contains(msg, k) {
			best = k
		}
	}
	return best
}
