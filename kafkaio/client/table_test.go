package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// configOf builds the configuration of one kind of client from a binding's
// properties, as the processor does; producers allow records of 1 MiB.
func configOf(kind Clients, props map[string]string) *kafka.ConfigMap {
	const timeout, maxRecord = 5 * time.Second, 1 << 20
	switch kind {
	case ProducerAcksNone:
		return ProducerConfig(props, timeout, AcksNone, maxRecord)
	case ProducerAcksLeader:
		return ProducerConfig(props, timeout, AcksLeader, maxRecord)
	case ProducerAcksAll:
		return ProducerConfig(props, timeout, AcksAll, maxRecord)
	case LiveConsumer:
		return LiveConsumerConfig(props, timeout, "g")
	case IndexConsumers:
		return ConsumerConfig(props, timeout, "g")
	case CatchUpConsumers:
		return CatchUpConfig(props, timeout, "g")
	case HistoryReaders:
		return HistoryReaderConfig(props, timeout, "g")
	case LookupClients:
		return LookupConfig(props, timeout)
	case ConnectionChecks:
		return CheckConfig(props, timeout)
	case ReplyReadBacks:
		return ReplyReadBackConfig(props, timeout, "g")
	case LogTailConsumer:
		return LogTailConfig(props, timeout, "g")
	}
	panic(fmt.Sprintf("no configuration for %v", kind))
}

// kinds are the single kinds of client in EveryClient.
func kinds() []Clients {
	var out []Clients
	for k := Clients(1); k&EveryClient != 0; k <<= 1 {
		out = append(out, k)
	}
	return out
}

// row is the table's row for name on kind, if any.
func row(name string, kind Clients) (Property, bool) {
	for _, p := range Properties {
		if p.Name == name && p.Clients&kind != 0 {
			return p, true
		}
	}
	return Property{}, false
}

// The configuration functions set exactly what Properties says, on the
// clients it says, with the rule it says: a property the code sets or drops
// without a row fails, and so does a row the code does not follow.
func TestConfigsFollowTheTable(t *testing.T) {
	const user = "the-binding's-value"
	for _, kind := range kinds() {
		// Nothing is set without a row.
		cm := configOf(kind, map[string]string{"bootstrap.servers": "x"})
		for name := range *cm {
			if name == "bootstrap.servers" {
				continue
			}
			if p, ok := row(name, kind); !ok || p.Rule == Dropped {
				t.Errorf("%v: %s is set (%v) but Properties has no row setting it", kind, name, (*cm)[name])
			}
		}
	}
	for _, p := range Properties {
		for _, kind := range kinds() {
			if p.Clients&kind == 0 {
				continue
			}
			checkRule(t, p, kind, user)
		}
	}
}

// checkRule checks that the configuration of kind follows p's rule.
func checkRule(t *testing.T, p Property, kind Clients, user string) {
	t.Helper()
	get := func(props map[string]string) (string, bool) {
		v, ok := (*configOf(kind, props))[p.Name]
		return fmt.Sprint(v), ok
	}
	none, set := get(map[string]string{})
	switch p.Rule {
	case Set:
		if got, ok := get(map[string]string{p.Name: user}); !set || !ok || got == user {
			t.Errorf("%v: %s is %q (set %v) without the binding's, %q with it: want the processor's always", kind, p.Name, none, set, got)
		}
	case Default:
		if got, _ := get(map[string]string{p.Name: user}); !set || got != user {
			t.Errorf("%v: %s is %q (set %v) without the binding's, %q with it: want the processor's unless the binding's", kind, p.Name, none, set, got)
		}
	case AtMost, AtLeast:
		low, high := "1", "999999999"
		keep, lose := low, high
		if p.Rule == AtLeast {
			keep, lose = high, low
		}
		kept, _ := get(map[string]string{p.Name: keep})
		lost, _ := get(map[string]string{p.Name: lose})
		if !set || kept != keep || lost == lose {
			t.Errorf("%v: %s is %q (set %v), %q for %s and %q for %s: want %v", kind, p.Name, none, set, kept, keep, lost, lose, p.Rule)
		}
	case Dropped:
		if got, ok := get(map[string]string{p.Name: user}); ok && got == user {
			t.Errorf("%v: the binding's %s passes through; the table drops it", kind, p.Name)
		}
	}
}

// A property has one row per kind of client.
func TestPropertiesOneRowPerClient(t *testing.T) {
	for i, p := range Properties {
		if p.Clients == 0 || p.Clients&^EveryClient != 0 {
			t.Errorf("%s: clients %#x", p.Name, uint16(p.Clients))
		}
		if p.Why == "" {
			t.Errorf("%s: no reason", p.Name)
		}
		if (p.Value == "") != (p.Rule == Dropped) {
			t.Errorf("%s: value %q with rule %v", p.Name, p.Value, p.Rule)
		}
		for _, q := range Properties[i+1:] {
			if q.Name == p.Name && q.Clients&p.Clients != 0 {
				t.Errorf("%s: two rows for %v", p.Name, q.Clients&p.Clients)
			}
		}
	}
}
