//go:build !nodev

package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	_ "github.com/kafka-ext-proc/kafka-ext-proc/proto/example" // the services the banner's grpcurl lines name
)

// topicFlag collects dev's repeatable --topic NAME[:PARTITIONS] flags:
// topics the configuration does not name statically (templated routes).
type topicFlag []embedded.Topic

const topicUsage = "create a topic on the embedded broker, NAME or NAME:PARTITIONS (repeatable; for templated topics)"

func (f *topicFlag) String() string {
	names := make([]string, len(*f))
	for i, t := range *f {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

func (f *topicFlag) Set(v string) error {
	name, parts, hasParts := strings.Cut(v, ":")
	if name == "" {
		return fmt.Errorf("%q: want NAME or NAME:PARTITIONS", v)
	}
	t := embedded.Topic{Name: name}
	if hasParts {
		n, err := strconv.ParseInt(parts, 10, 32)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: partitions must be a whole number of at least 1", v)
		}
		t.Partitions = int32(n)
	}
	*f = append(*f, t)
	return nil
}

// protoDir is where the example protos ship, relative to the repository.
const protoDir = "proto/example"

// grpcurlLines renders one ready-to-paste grpcurl line per method a gRPC
// route condition matches. The processor serves no reflection (the methods
// are the user's), so grpcurl reads the protos: for the services of the
// shipped examples the lines name their file, for others the user's own.
func grpcurlLines(c config.Condition, front string) []string {
	service, method, _ := strings.Cut(c.GRPCMethod, "/")
	if c.GRPCMethod == "" {
		service, method = c.Service, "*"
	}
	if service == "" {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		if method == "*" {
			method = "METHOD"
		}
		return []string{fmt.Sprintf("grpcurl -plaintext -proto YOUR.proto -d '{}' %s %s/%s", front, service, method)}
	}
	var lines []string
	file := sd.ParentFile().Path()
	for i := 0; i < sd.Methods().Len(); i++ {
		m := sd.Methods().Get(i)
		if method != "*" && string(m.Name()) != method {
			continue
		}
		lines = append(lines, fmt.Sprintf("grpcurl -plaintext -import-path %s -proto %s -d '%s' %s %s/%s",
			protoDir, file, sampleJSON(m.Input()), front, service, m.Name()))
	}
	return lines
}

// sampleJSON is a request with every top-level string field set, so the
// call carries something to see.
func sampleJSON(md protoreflect.MessageDescriptor) string {
	sample := map[string]string{}
	for i := 0; i < md.Fields().Len(); i++ {
		f := md.Fields().Get(i)
		if f.Kind() == protoreflect.StringKind && !f.IsList() && !f.IsMap() {
			sample[f.JSONName()] = "hello"
		}
	}
	b, _ := json.Marshal(sample)
	return string(b)
}
