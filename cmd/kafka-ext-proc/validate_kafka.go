package main

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// fileProperties are the librdkafka properties that name a file it opens
// when a client starts. librdkafka reports a missing one by its TLS
// library's error code alone ("ssl.ca.location failed: error:05880002:x509
// certificate routines::system lib"), so validate checks them first.
var fileProperties = []string{
	"ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
	"ssl.crl.location", "sasl.kerberos.keytab",
}

// checkKafkaProperties has librdkafka read every kafka binding's properties
// as serve will, without connecting, and reports each refused one at its
// place in the file. A file property naming a file that is not there is
// reported as missing, with the conversion command an import wrote above it,
// and left out of librdkafka's check.
func checkKafkaProperties(cfg *config.Config) error {
	names := make([]string, 0, len(cfg.Kafka))
	for name := range cfg.Kafka {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs config.Errors
	for _, name := range names {
		k := cfg.Kafka[name]
		props := maps.Clone(k.Properties)
		for _, p := range fileProperties {
			if e := missingFile(k, p); e != nil {
				errs = append(errs, e)
				delete(props, p)
			}
		}
		for _, pe := range client.CheckProperties(props) {
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

// missingFile reports a file property whose file does not exist. Paths are
// opened by librdkafka relative to the process's working directory, so they
// are checked from validate's. "probe" (ssl.ca.location: the system's CA
// store) names no file.
func missingFile(k *config.KafkaCluster, prop string) *config.Error {
	path := k.Properties[prop]
	if path == "" || (prop == "ssl.ca.location" && path == "probe") {
		return nil
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	pos, ok := k.PropertyPos[prop]
	if !ok {
		pos = k.Pos
	}
	msg := fmt.Sprintf("kafka property %q: the file %q is missing (librdkafka opens it from the working directory)", prop, path)
	if line, cmd := commandAbove(pos); cmd != "" {
		msg += fmt.Sprintf("; the comment above it (line %d) has the command that writes it: %s", line, cmd)
	}
	return &config.Error{Pos: pos, Msg: msg}
}

// commandAbove finds, in the comment lines right above pos, the keytool or
// openssl command `import zilla` writes beside a converted trust or key
// store, and returns its line and text ("" if there is none).
func commandAbove(pos config.Pos) (int, string) {
	src, err := os.ReadFile(pos.File)
	if err != nil {
		return 0, ""
	}
	lines := strings.Split(string(src), "\n")
	for i := pos.Line - 2; i >= 0 && i < len(lines); i-- {
		text, isComment := strings.CutPrefix(strings.TrimSpace(lines[i]), "#")
		if !isComment {
			break
		}
		text = strings.TrimSpace(text)
		if strings.HasPrefix(text, "keytool ") || strings.HasPrefix(text, "openssl ") {
			return i + 1, text
		}
	}
	return 0, ""
}
