// Package envoy reads the Envoy bootstrap (envoy.yaml) that fronts the
// processor: it loads it strictly into go-control-plane's Bootstrap, validates
// it with the protos' own rules (including every typed config inside an Any),
// checks what Envoy only checks in C++ and what the processor's design needs,
// and reduces it to the Settings the Envoy emulator runs on.
package envoy

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	// Every extension type envoy.yaml may name in an "@type", so that protojson
	// resolves the Anys (an unregistered type URL is an error, not a skip).
	_ "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/tracers/opentelemetry/samplers/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Load reads and parses an Envoy bootstrap file (see Parse).
func Load(path string) (*bootstrapv3.Bootstrap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading Envoy bootstrap: %w", err)
	}
	b, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// Parse converts YAML to JSON (duplicate keys rejected) and unmarshals it into
// a Bootstrap with protojson, which rejects unknown fields and unknown "@type"s
// as Envoy does. It does not validate; see Validate and Check.
func Parse(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parsing Envoy bootstrap YAML: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("decoding Envoy bootstrap%s: %w", yamlLineHint(data, err), err)
	}
	return b, nil
}

// yamlLineHint points at the YAML lines that may hold the field protojson
// refused: its own positions are in the converted JSON, which no one sees.
func yamlLineHint(data []byte, err error) string {
	const marker = `unknown field "`
	msg := err.Error()
	i := strings.Index(msg, marker)
	if i < 0 {
		return ""
	}
	field, _, ok := strings.Cut(msg[i+len(marker):], `"`)
	if !ok || field == "" {
		return ""
	}
	var lines []string
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		t := strings.TrimLeft(line, " -{,")
		if strings.HasPrefix(t, field+":") || strings.Contains(line, " "+field+":") || strings.Contains(line, "{"+field+":") {
			lines = append(lines, strconv.Itoa(i+1))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return " (YAML line " + strings.Join(lines, ", ") + ")"
}
