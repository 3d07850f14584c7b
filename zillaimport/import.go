// Package zillaimport translates a Zilla configuration (zilla.yaml) whose
// http-kafka, grpc-kafka and sse-kafka bindings front Kafka, and whose
// kafka-grpc bindings call gRPC services for the records, into a
// kafka-ext-proc configuration and an Envoy bootstrap. Whatever it drops or changes is said
// in a comment of the output; whatever it cannot translate is an error at its
// line, never a silent drop. Only the command line uses it.
package zillaimport

import (
	"cmp"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// Result is an imported configuration.
type Result struct {
	// Config is the kafka-ext-proc configuration, with comments.
	Config []byte
	// Envoy is an envoy.yaml: listeners on the tcp server bindings' ports,
	// routes sending the proxies' paths through the processor.
	Envoy []byte
}

// Import translates the zilla.yaml src, read from file (used in messages).
// Refusals are config.Errors, each at the line it concerns. The result has
// been loaded by the configuration loader and the Envoy checks before it is
// returned.
func Import(file string, src []byte) (*Result, error) {
	root, err := parse(file, src)
	if err != nil {
		return nil, err
	}
	im := &importer{file: file, root: root, bindings: map[string]*node{}, used: map[string]bool{}, urlVars: map[string]bool{}, hostVars: map[string]string{}}
	im.run()
	if len(im.errs) > 0 {
		slices.SortStableFunc(im.errs, func(a, b *config.Error) int { return cmp.Compare(a.Pos.Line, b.Pos.Line) })
		return nil, im.errs
	}
	res := &Result{Config: im.render(), Envoy: im.renderEnvoy()}
	// Anything the loader refuses is an importer bug or a combination it
	// does not know; say so rather than print a file that does not load.
	// Named as if saved in the working directory: the output's paths are
	// written relative to it (inputRelative).
	cfg, err := config.Parse(filepath.Base(file)+" (imported)", res.Config, im.placeholderEnv)
	if err != nil {
		return nil, fmt.Errorf("the imported configuration does not load (please report this): %w", err)
	}
	b, err := envoy.Parse(res.Envoy)
	if err == nil {
		err = envoy.Validate(b)
	}
	if err == nil {
		err = envoy.Check(b, envoy.CheckOptions{MaxWait: cfg.Limits.MaxWait, ReplyTimeout: cfg.Limits.ReplyTimeout})
	}
	if err != nil {
		return nil, fmt.Errorf("the generated envoy.yaml does not pass the checks (please report this): %w", err)
	}
	return res, nil
}

// placeholderEnv stands in for the environment when the importer checks its
// output: the variables are read where the configuration runs. A variable
// that starts a catalog's url stands for a URL, whatever its name (Zilla's
// examples call the registry's SCHEMA_REGISTRY_SERVER); one in a gRPC
// service's host or port for a host or a port (Zilla's ECHO_SERVER_HOST);
// one named for servers or a bootstrap elsewhere stands for brokers.
func (im *importer) placeholderEnv(name string) (string, bool) {
	switch {
	case im.urlVars[name]:
		return "http://localhost:8081", true
	case im.hostVars[name] != "":
		return im.hostVars[name], true
	case strings.Contains(name, "SERVER"), strings.Contains(name, "BOOTSTRAP"):
		return "localhost:9092", true
	}
	return "placeholder", true
}

type importer struct {
	file     string
	root     *node
	bindings map[string]*node
	order    []string
	used     map[string]bool // bindings and guards the output accounts for
	errs     config.Errors

	notes  []note // comments at the top of the output
	kafka  *omap  // kafka client bindings
	procs  *omap  // http-kafka and grpc-kafka bindings
	guards *omap
	// catalogs are the catalogs topic models name (models.go).
	catalogs *omap
	// listeners are the tcp server ports and what they lead to.
	listeners []listener
	// urlVars are the variables a catalog's url starts with.
	urlVars map[string]bool
	// hostVars are the variables in a gRPC service's host or port, with
	// a value of that kind for the check of the output.
	hostVars map[string]string
}

func (im *importer) errorf(n *node, format string, args ...any) {
	pos := config.Pos{File: im.file}
	if n != nil {
		pos = n.pos
	}
	im.errs = append(im.errs, &config.Error{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

// note is a comment at the top of the output about a line of the input.
type note struct {
	line int
	text string
}

func (im *importer) note(n *node, format string, args ...any) {
	im.notes = append(im.notes, note{n.pos.Line, fmt.Sprintf(format, args...)})
}

// run translates the whole document: the top level, then the bindings in
// the order their references need, then notes on what nothing used.
func (im *importer) run() {
	im.kafka, im.procs, im.guards, im.catalogs = &omap{}, &omap{}, &omap{}, &omap{}
	if im.root.kind != mapNode {
		im.errorf(im.root, "a zilla.yaml is a map with bindings")
		return
	}
	im.topLevel()
	bs := im.root.get("bindings")
	if bs == nil || bs.kind != mapNode {
		im.errorf(im.root, "no bindings")
		return
	}
	for _, e := range bs.entries {
		im.bindings[e.key] = e.val
		im.order = append(im.order, e.key)
	}
	if gs := im.root.get("guards"); gs != nil {
		for _, e := range gs.mapEntries() {
			im.guard(e.key, e.val)
		}
	}
	im.translateBindings()
	im.unusedBindings()
	im.unusedResources()
}

// topLevel reads the document's top-level keys other than the bindings,
// guards, vaults and catalogs, which run reads in their turn.
func (im *importer) topLevel() {
	for _, e := range im.root.entries {
		switch e.key {
		case "name":
			im.note(e.val, "name %q (Zilla's namespace) dropped: binding names stand alone here", e.val.str())
		case "bindings", "guards", "vaults", "catalogs":
			// read by run
		case "telemetry":
			im.telemetry(e.val)
		default:
			im.errorf(e.val, "top-level %q is not something the importer knows; only name, bindings, guards, vaults, catalogs and telemetry", e.key)
		}
	}
}

// translateBindings translates the bindings the processor has a
// counterpart for.
func (im *importer) translateBindings() {
	// Kafka clusters first: the proxies' routes name them.
	for _, name := range im.order {
		b := im.bindings[name]
		if b.get("type").str() == "kafka" && b.get("kind").str() == "client" {
			im.kafkaClient(name, b)
		}
	}
	im.models()
	for _, name := range im.order {
		b := im.bindings[name]
		switch typ, kind := b.get("type").str(), b.get("kind").str(); {
		case typ == "http-kafka" && kind == "proxy":
			im.httpKafka(name, b)
		case typ == "grpc-kafka" && kind == "proxy":
			im.grpcKafka(name, b)
		case typ == "sse-kafka" && kind == "proxy":
			im.sseKafka(name, b)
		case typ == "kafka-grpc":
			im.kafkaGRPC(name, b)
		case typ == "tcp" && kind == "server":
			im.tcpServer(name, b)
		}
	}
}

// unusedBindings explains each binding no translation accounted for.
func (im *importer) unusedBindings() {
	for _, name := range im.order {
		if !im.used[name] {
			im.used[name] = true
			im.unused(name, im.bindings[name])
		}
	}
}

// unusedResources notes the guards, vaults and catalogs dropped because
// nothing translated uses them.
func (im *importer) unusedResources() {
	if gs := im.root.get("guards"); gs != nil {
		for _, e := range gs.mapEntries() {
			if !im.used["guard "+e.key] && e.val.get("type").str() == "inline" {
				im.note(e.val, "guard %s (inline) dropped: nothing here uses it", e.key)
			}
		}
	}
	if vs := im.root.get("vaults"); vs != nil {
		for _, e := range vs.mapEntries() {
			if !im.used["vault "+e.key] {
				im.note(e.val, "vault %s dropped: no tls client binding uses it", e.key)
			}
		}
	}
	if cs := im.root.get("catalogs"); cs != nil {
		for _, e := range cs.mapEntries() {
			if im.used["catalog "+e.key] {
				continue
			}
			im.note(e.val, "catalog %s dropped: the processor needs no protobuf descriptors (it forwards gRPC messages as bytes); keep the .proto files for your clients", e.key)
		}
	}
}

// unused explains a binding nothing translated accounted for.
func (im *importer) unused(name string, b *node) {
	typ, kind := b.get("type").str(), b.get("kind").str()
	switch {
	case typ == "kafka" && (kind == "cache_client" || kind == "cache_server"):
		im.note(b, "binding %s (kafka %s) dropped: fetch routes read their topics as views (current record per key), which is what Zilla's cache gives", name, kind)
	case typ == "tcp" && kind == "client", typ == "tls" && kind == "client", typ == "grpc" && kind == "client", typ == "http" && kind == "client":
		im.note(b, "binding %s (%s client) dropped: nothing translated uses it", name, typ)
	case typ == "http" && kind == "server", typ == "grpc" && kind == "server", typ == "tls" && kind == "server", typ == "sse" && kind == "server":
		im.note(b, "binding %s (%s server) dropped: no tcp server binding leads to it, so no Envoy listener was written for it", name, typ)
	case typ == "":
		im.errorf(b, "binding %s has no type", name)
	default:
		im.errorf(b, "binding %s: type %s kind %s cannot be translated: kafka-ext-proc covers http-kafka, grpc-kafka and sse-kafka proxies over kafka clients, fronted by Envoy, and kafka-grpc bindings calling gRPC services", name, typ, kind)
	}
}

// kafkaGRPCAlternatives ends the refusal of a kafka-grpc binding's shape
// the importer cannot translate: what to do instead.
const kafkaGRPCAlternatives = "write a kafka-grpc binding by hand, its routes naming the service's scheme and authority (docs/configuration.md#kafka-grpc-bindings), " +
	"or run a Kafka consumer that calls the service (docs/service-contract.md says what to read and write)"

func (im *importer) telemetry(t *node) {
	msg := "telemetry dropped: metrics are always served in Prometheus format at /metrics on the admin port (serve --admin); traces go to an OTLP collector with serve --otlp-endpoint; logs are JSON on stderr"
	if ex := t.get("exporters"); ex != nil {
		for _, e := range ex.mapEntries() {
			if e.val.get("type").str() == "otlp" {
				if ep := e.val.get("options").get("endpoint").str(); ep != "" {
					msg += fmt.Sprintf(" (exporter %s: serve --otlp-endpoint with the host:port of %s)", e.key, im.env(e.val, ep))
				}
			}
		}
	}
	im.note(t, "%s", msg)
}

var (
	zillaEnvRe = regexp.MustCompile(`\$\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	zillaExpr  = regexp.MustCompile(`\$\{\{.*?\}\}`)
)

// env rewrites Zilla's ${{env.X}} as ${env:X} and refuses any other ${{...}}.
func (im *importer) env(n *node, s string) string {
	out := zillaEnvRe.ReplaceAllString(s, "$${env:$1}")
	if m := zillaExpr.FindString(out); m != "" {
		im.errorf(n, "%s: only ${{env.NAME}} expressions can be translated (to ${env:NAME})", m)
	}
	return out
}

// scalarOf is a scalar's translated text; it reports a non-scalar.
func (im *importer) scalarOf(n *node, what string) string {
	if n == nil {
		return ""
	}
	if n.kind != scalarNode {
		im.errorf(n, "%s: want a single value", what)
		return ""
	}
	return im.env(n, n.scalar)
}

// stringMap copies a map of scalars.
func (im *importer) stringMap(n *node, what string) *omap {
	out := &omap{}
	if n == nil {
		return out
	}
	if n.kind != mapNode {
		im.errorf(n, "%s: want a map", what)
		return out
	}
	for _, e := range n.entries {
		out.set(e.key, im.scalarOf(e.val, what+"."+e.key))
	}
	return out
}

// known refuses the keys of a map node that are not listed.
func (im *importer) known(n *node, what string, keys ...string) {
	if n == nil || n.kind != mapNode {
		return
	}
	for _, e := range n.entries {
		if !slices.Contains(keys, e.key) {
			im.errorf(e.val, "%s.%s is not a field the importer knows (known: %s)", what, e.key, strings.Join(keys, ", "))
		}
	}
}

func routeExits(b *node) []*node {
	var out []*node
	for _, r := range b.get("routes").list() {
		out = append(out, r.get("exit"))
	}
	return out
}
