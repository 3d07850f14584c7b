package main

import (
	"fmt"
	"slices"
	"sort"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// checkKafkaProperties has librdkafka read every kafka binding's properties
// as serve will, without connecting, and reports each refused one at its
// place in the file.
func checkKafkaProperties(cfg *config.Config) error {
	names := make([]string, 0, len(cfg.Kafka))
	for name := range cfg.Kafka {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs config.Errors
	for _, name := range names {
		k := cfg.Kafka[name]
		for _, pe := range client.CheckProperties(k.Properties) {
			pos, ok := k.PropertyPos[pe.Property]
			if !ok {
				pos = k.Pos
			}
			msg := fmt.Sprintf("kafka binding %q: librdkafka refuses its options: %s", name, pe.Msg)
			if pe.Property != "" {
				msg = fmt.Sprintf("kafka property %q: librdkafka refuses %q: %s", pe.Property, k.Properties[pe.Property], pe.Msg)
			}
			errs = append(errs, &config.Error{Pos: pos, Msg: msg})
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *config.Error) int {
		if a.Pos.Line != b.Pos.Line {
			return a.Pos.Line - b.Pos.Line
		}
		return a.Pos.Col - b.Pos.Col
	})
	return errs
}
