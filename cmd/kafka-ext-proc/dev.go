//go:build !nodev

// The development stack (embedded broker, Envoy emulator) is left out of
// builds with -tags nodev, as the Dockerfile builds the production image;
// dev_nodev.go stands in for it there.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseDevFlags(args, stderr)
	if err != nil {
		return err
	}
	logger, err := newLogger(stderr, f.level, false)
	if err != nil {
		return err
	}
	envoyYAML := envoy.DefaultYAML()
	if f.envoyPath != "" {
		if envoyYAML, err = os.ReadFile(f.envoyPath); err != nil {
			return fmt.Errorf("reading %s: %w", f.envoyPath, err)
		}
	}
	if f.front == "" {
		if f.front, err = frontOf(envoyYAML); err != nil {
			return err
		}
	}
	if f.processor != "" {
		return frontOnly(ctx, f.cfgPath, envoyYAML, f.front, f.processor, logger, stdout)
	}
	reg, err := f.startRegistry()
	if err != nil {
		return err
	}
	if reg != nil {
		defer reg.Close() //nolint:errcheck // dev is stopping; nothing is kept
	}
	dc, err := loadDevConfig(f, reg)
	if err != nil {
		return err
	}
	d, err := stack.StartDev(stack.DevOptions{
		Config: dc.cfg, Envoy: envoyYAML, Existing: f.existing(),
		Front: f.front, Listen: f.listen, Kafka: f.kafka, Admin: f.admin,
		Logger: logger, Responders: dc.responders, Replicas: f.replicas,
		BrokerOptions: embedded.Options{DataDir: f.data, Partitions: int32(f.partitions), Topics: f.topics},
	})
	if err != nil {
		return err
	}
	defer d.Close()
	var created []embedded.Topic
	if d.Broker != nil {
		created = append(slices.Clone([]embedded.Topic(f.topics)), stack.TopicsOf(dc.cfg)...)
		for i := range created {
			if created[i].Partitions == 0 {
				created[i].Partitions = int32(f.partitions)
			}
		}
	}
	fmt.Fprint(stdout, banner(d, f.data, created, dc.dropped, dc.unsetEnv, reg))
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping")
	return nil
}

// devFlags are dev's command line.
type devFlags struct {
	cfgPath, envoyPath string
	front, listen      string
	kafka              string // an address, or "existing"
	processor          string // run only the emulator, in front of this processor
	admin, level, data string
	registry           string // the embedded Schema Registry's address
	schemas            schemaFlag
	partitions         int
	replicas           int
	responders         responderFlag
	topics             topicFlag
}

// existing reports whether dev runs against the configuration's own
// cluster instead of an embedded broker.
func (f *devFlags) existing() bool { return f.kafka == "existing" }

func parseDevFlags(args []string, stderr io.Writer) (*devFlags, error) {
	f := &devFlags{}
	fs := newFlags("dev", stderr)
	fs.StringVar(&f.cfgPath, "config", "", "configuration file (default: the bundled demo)")
	fs.StringVar(&f.envoyPath, "envoy", "", "envoy.yaml the emulator follows (default: the bundled envoy/envoy.yaml)")
	fs.StringVar(&f.front, "front", "", "Envoy emulator address, HTTP/1.1 and h2c (default: 127.0.0.1 and the port of the Envoy file's first listener, 8080 in the bundled one)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:50051", "processor ext_proc address")
	fs.StringVar(&f.kafka, "kafka", "127.0.0.1:9092", "embedded Kafka broker address, or \"existing\": the configuration's own cluster (its bootstrap and security properties; no topic is created)")
	fs.StringVar(&f.processor, "processor", "", "run only the Envoy emulator, in front of the processor (serve) already running at this ext_proc address")
	fs.StringVar(&f.admin, "admin", "127.0.0.1:9090", "admin HTTP address (/metrics, /healthz, /readyz)")
	fs.StringVar(&f.level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.data, "data", "", "keep the embedded broker's topics and records in this directory across restarts (default: in memory)")
	fs.IntVar(&f.partitions, "partitions", 1, "partitions of the topics the embedded broker creates")
	fs.IntVar(&f.replicas, "replicas", 1, "processors behind the emulator, which spreads requests over them round robin as Envoy does (the first on --listen and --admin, the others on free ports)")
	fs.StringVar(&f.registry, "registry", "127.0.0.1:8081", "embedded Schema Registry address (Confluent API), started when the configuration has schema-registry catalogs, which dev points at it")
	fs.Var(&f.schemas, "schema", schemaUsage)
	fs.Var(&f.responders, "responder", responderUsage)
	fs.Var(&f.topics, "topic", topicUsage)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if f.partitions < 1 {
		return nil, usageError{fmt.Sprintf("--partitions %d: want at least 1", f.partitions)}
	}
	if f.replicas < 1 || f.replicas > 16 {
		return nil, usageError{fmt.Sprintf("--replicas %d: want 1 to 16", f.replicas)}
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, mode := range []struct {
		on        bool
		name      string
		conflicts []string
	}{
		// No embedded broker runs in these modes.
		{f.processor != "", "--processor", []string{"kafka", "listen", "admin", "data", "partitions", "topic", "responder", "replicas", "registry", "schema"}},
		{f.existing(), "--kafka existing", []string{"data", "partitions", "topic", "registry", "schema"}},
	} {
		for _, c := range mode.conflicts {
			if mode.on && set[c] {
				return nil, usageError{fmt.Sprintf("--%s does not go with %s", c, mode.name)}
			}
		}
	}
	return f, nil
}

// devConfig is the configuration dev runs and what it changed to run it.
type devConfig struct {
	cfg        *config.Config
	responders []responder.Options
	dropped    map[string][]string // TLS and SASL properties dropped, by kafka binding
	unsetEnv   []string            // environment variables unset, and not needed
}

// loadDevConfig loads the configuration dev runs (the bundled demo without
// --config) and the responders that answer its request-reply routes.
func loadDevConfig(f *devFlags, reg *devRegistry) (*devConfig, error) {
	dc := &devConfig{}
	var err error
	switch {
	case f.cfgPath == "":
		dc.cfg, err = config.Parse("demo.yaml", demoConfig, os.LookupEnv)
		// The demo's request-reply route needs someone to answer.
		dc.responders = append(dc.responders, responder.Options{
			Topic: "orders-requests", ReplyTo: "orders-responses", Handler: responder.HTTPEcho(),
		}, responder.Options{
			Topic: "echo-requests", ReplyTo: "echo-responses", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey,
		})
	case f.existing():
		// The user's cluster: every property counts, so every variable must be set.
		dc.cfg, err = config.Load(f.cfgPath)
	default:
		dc.cfg, dc.unsetEnv, err = loadForDev(f.cfgPath, reg)
	}
	if err != nil {
		return nil, err
	}
	if f.existing() {
		// The demo's responders answer on the configuration's own cluster.
		for i := range dc.responders {
			dc.responders[i].Properties = clusterOfTopic(dc.cfg, dc.responders[i].Topic)
		}
	} else {
		// The embedded broker speaks plaintext without authentication.
		dc.cfg, dc.dropped = withoutKafkaSecurity(dc.cfg)
	}
	more, err := f.responders.options(dc.cfg, dc.responders)
	if err != nil {
		return nil, err
	}
	dc.responders = append(dc.responders, more...)
	return dc, nil
}

// envRefRe finds ${env:NAME} references.
var envRefRe = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}`)

// unsetMarker stands in for an unset environment variable while dev loads a
// configuration; loadForDev refuses it anywhere dev does not replace.
const unsetMarker = "kafka-ext-proc-dev-unset-env-"

// loadForDev loads a configuration the way config.Load does, except that
// environment variables may be unset when only kafka properties dev replaces
// use them (bootstrap.servers, TLS and SASL): a configuration written for a
// real cluster, such as an imported zilla.yaml, runs as it is. It returns
// the names of those variables.
func loadForDev(path string, reg *devRegistry) (*config.Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	var unset []string
	if reg != nil {
		// Pointed at the embedded registry as the kafka bindings are at
		// the embedded broker; a variable only the url used is not needed.
		var replaced []string
		data, replaced = pointRegistries(data, reg.urls, reg.url)
		for _, m := range envRefRe.FindAllStringSubmatch(strings.Join(replaced, " "), -1) {
			if _, ok := os.LookupEnv(m[1]); !ok && !slices.Contains(unset, m[1]) {
				unset = append(unset, m[1])
			}
		}
	}
	cfg, err := config.Parse(path, data, func(name string) (string, bool) {
		if v, ok := os.LookupEnv(name); ok {
			return v, true
		}
		if !slices.Contains(unset, name) {
			unset = append(unset, name)
		}
		return unsetMarker + name, true
	})
	if err != nil || len(unset) == 0 {
		return cfg, unset, err
	}
	probe, _ := withoutKafkaSecurity(cfg)
	js, err := json.Marshal(stack.PointAt(probe, ""))
	if err != nil {
		return nil, nil, fmt.Errorf("checking the configuration's environment variables: %w", err)
	}
	for _, name := range unset {
		if bytes.Contains(js, []byte(unsetMarker+name)) {
			return nil, nil, fmt.Errorf("%s: environment variable %s is not set (dev replaces only kafka bootstrap.servers, TLS and SASL properties)", path, name)
		}
	}
	return cfg, unset, nil
}

// withoutKafkaSecurity returns a copy of cfg without the TLS and SASL
// properties of its kafka bindings, and those it dropped by binding name
// (sorted): dev points the bindings at its plaintext embedded broker, so a
// configuration written for a secured cluster runs as it is.
func withoutKafkaSecurity(cfg *config.Config) (*config.Config, map[string][]string) {
	out := *cfg
	out.Kafka = make(map[string]*config.KafkaCluster, len(cfg.Kafka))
	dropped := map[string][]string{}
	for name, k := range cfg.Kafka {
		kc := *k
		kc.Properties = make(map[string]string, len(k.Properties))
		for p, v := range k.Properties {
			if p == "security.protocol" || strings.HasPrefix(p, "ssl.") || strings.HasPrefix(p, "sasl.") {
				dropped[name] = append(dropped[name], p)
				continue
			}
			kc.Properties[p] = v
		}
		slices.Sort(dropped[name])
		out.Kafka[name] = &kc
	}
	return &out, dropped
}

// banner tells a newcomer where everything is and what to try.
func banner(d *stack.Dev, dir string, topics []embedded.Topic, dropped map[string][]string, unsetEnv []string, reg *devRegistry) string {
	var b strings.Builder
	front := d.Front()
	fmt.Fprintf(&b, "kafka-ext-proc dev is running\n")
	fmt.Fprintf(&b, "  front (Envoy emulator): http://%s\n", front)
	if len(d.Replicas) == 1 {
		fmt.Fprintf(&b, "  processor (ext_proc):   %s\n", d.Processor.Addr())
	}
	if d.Broker != nil {
		fmt.Fprintf(&b, "  Kafka (embedded):       %s\n", d.Broker.Addr())
	} else {
		for _, name := range slices.Sorted(maps.Keys(d.Config.Kafka)) {
			fmt.Fprintf(&b, "  Kafka (existing):       %s (kafka %s; no topic created)\n", bootstrapOf(d.Config.Kafka[name]), name)
		}
	}
	if dir != "" {
		fmt.Fprintf(&b, "  Kafka data:             %s (kept across restarts)\n", dir)
	}
	if reg != nil {
		fmt.Fprintf(&b, "  Schema Registry (embedded): %s (catalogs %s point here; register schemas with POST %s/subjects/SUBJECT/versions)\n", reg.url, strings.Join(reg.catalogs(), ", "), reg.url)
	}
	if line := topicsLine(topics); line != "" {
		fmt.Fprintf(&b, "  topics:                 %s\n", line)
	}
	if a := d.Processor.AdminAddr(); a != "" && len(d.Replicas) == 1 {
		fmt.Fprintf(&b, "  admin:                  http://%s/readyz  http://%s/metrics\n", a, a)
	}
	if len(d.Replicas) > 1 {
		fmt.Fprintf(&b, "  %d processors behind the front, round robin:\n", len(d.Replicas))
		for i, p := range d.Replicas {
			fmt.Fprintf(&b, "  replica %d (ext_proc):   %s", i+1, p.Addr())
			if a := p.AdminAddr(); a != "" {
				fmt.Fprintf(&b, "  admin: http://%s/metrics", a)
			}
			b.WriteString("\n")
		}
	}
	for _, r := range d.Responders {
		fmt.Fprintf(&b, "  demo responder:         answers %s\n", r.Topic())
	}
	for _, name := range slices.Sorted(maps.Keys(dropped)) {
		fmt.Fprintf(&b, "  kafka %s: TLS and SASL dropped for the embedded broker (%s)\n", name, strings.Join(dropped[name], ", "))
	}
	if len(unsetEnv) > 0 {
		fmt.Fprintf(&b, "  not set, not needed here: %s\n", strings.Join(unsetEnv, ", "))
	}
	fmt.Fprintf(&b, "\nTry:\n")
	for _, line := range tryLines(d.Config, front) {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	fmt.Fprintf(&b, "\n%s\nCtrl-C stops it.\n", devOnlyNotice)
	return b.String()
}

// devOnlyNotice closes every banner: the emulator mimics Envoy for trying
// things out; it has none of Envoy's hardening.
const devOnlyNotice = "The Envoy emulator is for development only, never a production front: deploy Envoy (envoy/envoy.yaml)."

// clusterOfTopic is a copy of the properties of the kafka binding a route
// writing topic exits to (nil: none does).
func clusterOfTopic(cfg *config.Config, topic string) map[string]string {
	for _, b := range cfg.Bindings {
		for _, r := range b.Routes {
			if r.With != nil && r.With.Capability == config.Produce && r.With.Topic.Raw == topic && cfg.Kafka[r.Exit] != nil {
				return maps.Clone(cfg.Kafka[r.Exit].Properties)
			}
		}
	}
	return nil
}

func bootstrapOf(k *config.KafkaCluster) string {
	if s := k.Properties["bootstrap.servers"]; s != "" {
		return s
	}
	return k.Properties["metadata.broker.list"]
}

// frontOnly runs the Envoy emulator alone in front of a running processor,
// so a deployment can be tried with curl and grpcurl before Envoy is
// installed. The configuration (the demo by default) only gives the lines
// to try: the processor has its own.
func frontOnly(ctx context.Context, cfgPath string, envoyYAML []byte, frontAddr, processorAddr string, logger *slog.Logger, stdout io.Writer) error {
	var cfg *config.Config
	var err error
	if cfgPath == "" {
		cfg, err = config.Parse("demo.yaml", demoConfig, os.LookupEnv)
	} else {
		cfg, _, err = loadForDev(cfgPath, nil)
	}
	if err != nil {
		return err
	}
	f, err := stack.StartFront(envoyYAML, frontAddr, processorAddr, logger)
	if err != nil {
		return err
	}
	defer f.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "kafka-ext-proc dev is running (the Envoy emulator only)\n")
	fmt.Fprintf(&b, "  front (Envoy emulator): http://%s\n", f.Addr())
	fmt.Fprintf(&b, "  processor (ext_proc):   %s (running on its own)\n", processorAddr)
	fmt.Fprintf(&b, "\nTry:\n")
	for _, line := range tryLines(cfg, f.Addr()) {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	fmt.Fprintf(&b, "\n%s\nCtrl-C stops it.\n", devOnlyNotice)
	fmt.Fprint(stdout, b.String())
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping")
	return nil
}

// tryLines renders one request per route condition, with path parameters
// filled in, so the lines always match the configuration being run.
func tryLines(cfg *config.Config, front string) []string {
	var lines []string
	seen := map[string]bool{}
	for _, bnd := range cfg.Bindings {
		for _, r := range bnd.Routes {
			for _, c := range r.When {
				var more []string
				switch bnd.Type {
				case config.HTTPKafka:
					if c.Path == nil {
						continue
					}
					more = []string{curlLine(c, r.With, front)}
				case config.GRPCKafka:
					more = grpcurlLines(c, front)
				case config.SSEKafka:
					if c.Path == nil {
						continue
					}
					more = []string{sseCurlLine(c, front)}
				}
				for _, line := range more {
					if line != "" && !seen[line] {
						seen[line] = true
						lines = append(lines, line)
					}
				}
			}
		}
	}
	return lines
}

// sseCurlLine follows an sse-kafka route's event stream: -N shows each
// event as it comes.
func sseCurlLine(c config.Condition, front string) string {
	return fmt.Sprintf("curl -N 'http://%s%s' -H 'accept: text/event-stream'", front, examplePath(c))
}

func curlLine(c config.Condition, with *config.With, front string) string {
	path := examplePath(c)
	method := c.Method
	if method == "" {
		method = "PUT"
	}
	url := "http://" + front + path
	switch {
	case method == "GET" || method == "DELETE" || method == "HEAD":
		if method == "GET" {
			return fmt.Sprintf("curl -i '%s'", url)
		}
		return fmt.Sprintf("curl -i -X %s '%s'", method, url)
	case with != nil && with.Capability == config.Produce && len(with.Async) > 0:
		return fmt.Sprintf("curl -i -X %s '%s' -H 'content-type: application/json' -H 'prefer: respond-async' -d '{\"qty\":1}'", method, url)
	default:
		return fmt.Sprintf("curl -i -X %s '%s' -H 'content-type: application/json' -d '{\"name\":\"pen\"}'", method, url)
	}
}

// examplePath is a condition's path with its parameters filled in.
func examplePath(c config.Condition) string {
	var path strings.Builder
	for _, p := range c.Path.Parts {
		switch {
		case p.Param == "correlationId":
			path.WriteString("CORRELATION-ID")
		case p.Param != "":
			path.WriteString("1")
		default:
			path.WriteString(p.Literal)
		}
	}
	return path.String()
}

// frontOf is dev's default front: the port of the Envoy file's first
// listener, whose routes the emulator follows, so the commands written for
// that Envoy (an imported Zilla example's port among them) work unchanged.
// It stays on the loopback address: dev is never a public front.
func frontOf(envoyYAML []byte) (string, error) {
	b, err := envoy.Parse(envoyYAML)
	if err != nil {
		return "", fmt.Errorf("reading the Envoy file's listener: %w", err)
	}
	ls := b.GetStaticResources().GetListeners()
	if len(ls) == 0 || ls[0].GetAddress().GetSocketAddress().GetPortValue() == 0 {
		return "", usageError{"the Envoy file has no static listener with a port: give --front"}
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ls[0].GetAddress().GetSocketAddress().GetPortValue()))), nil
}

// topicsLine lists the topics dev created, each once, in name order, saying
// which are compacted and which have more than one partition.
func topicsLine(topics []embedded.Topic) string {
	seen := map[string]bool{}
	var names []string
	for _, t := range topics {
		if seen[t.Name] {
			continue
		}
		seen[t.Name] = true
		name := t.Name
		var notes []string
		if t.Partitions > 1 {
			notes = append(notes, strconv.Itoa(int(t.Partitions))+" partitions")
		}
		if t.Compact {
			notes = append(notes, "compacted")
		}
		if len(notes) > 0 {
			name += " (" + strings.Join(notes, ", ") + ")"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
