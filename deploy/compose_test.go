package deploy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// root is the repository root, where docker-compose.yml resolves its
// relative paths.
const root = ".."

// The services the stack is made of, by role.
const (
	kafkaSvc     = "kafka"
	topicsSvc    = "kafka-topics"
	processorSvc = "kafka-ext-proc"
	envoySvc     = "envoy"
)

// compose is the part of the Compose file format the checks read.
type compose struct {
	Services map[string]*service `yaml:"services"`
}

type service struct {
	Image       string               `yaml:"image"`
	Build       any                  `yaml:"build"`
	PullPolicy  string               `yaml:"pull_policy"`
	Hostname    string               `yaml:"hostname"`
	Command     []string             `yaml:"command"`
	Environment map[string]string    `yaml:"environment"`
	Ports       []string             `yaml:"ports"`
	Volumes     []string             `yaml:"volumes"`
	DependsOn   map[string]dependsOn `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type dependsOn struct {
	Condition string `yaml:"condition"`
}

// stackFiles is docker-compose.yml with what its services mount, loaded.
type stackFiles struct {
	compose   *compose
	cfg       *config.Config // the processor's mounted configuration
	cfgHost   string         // its path on the host
	envoyHost string         // the mounted envoy.yaml on the host
}

func loadStack(t *testing.T) *stackFiles {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	c := &compose{}
	if err := yaml.Unmarshal(data, c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{kafkaSvc, topicsSvc, processorSvc, envoySvc} {
		if c.Services[name] == nil {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
	}
	s := &stackFiles{compose: c}
	proc := c.Services[processorSvc]
	s.cfgHost = hostFileFor(t, proc, flagValue(t, proc.Command, "--config"))
	s.cfg, err = config.Load(s.cfgHost)
	if err != nil {
		t.Fatalf("the processor's configuration: %v", err)
	}
	env := c.Services[envoySvc]
	s.envoyHost = hostFileFor(t, env, flagValue(t, env.Command, "-c"))
	return s
}

// flagValue is the argument after flag in a command.
func flagValue(t *testing.T, cmd []string, flag string) string {
	t.Helper()
	i := slices.Index(cmd, flag)
	if i < 0 || i+1 >= len(cmd) {
		t.Fatalf("command %q has no %s", cmd, flag)
	}
	return cmd[i+1]
}

// mount is one bind mount `host:container[:options]` of a service.
type mount struct{ host, container, options string }

func mounts(s *service) []mount {
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.SplitN(v, ":", 3)
		m := mount{host: parts[0]}
		if len(parts) > 1 {
			m.container = parts[1]
		}
		if len(parts) > 2 {
			m.options = parts[2]
		}
		out = append(out, m)
	}
	return out
}

// hostFileFor is the host file a service mounts at a container path.
func hostFileFor(t *testing.T, s *service, container string) string {
	t.Helper()
	for _, m := range mounts(s) {
		if m.container == container {
			return filepath.Join(root, m.host)
		}
	}
	t.Fatalf("no volume mounts %s (volumes %q)", container, s.Volumes)
	return ""
}

func port(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("%q: %v", hostport, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: %v", hostport, err)
	}
	return n
}

// published maps container ports to the host ports they are published on
// ("[ip:]host:container" entries).
func published(t *testing.T, s *service) map[int]string {
	t.Helper()
	out := map[int]string{}
	for _, p := range s.Ports {
		i := strings.LastIndexByte(p, ':')
		if i < 0 {
			t.Fatalf("port %q: publish as [ip:]host:container", p)
		}
		c, err := strconv.Atoi(p[i+1:])
		if err != nil {
			t.Fatalf("port %q: %v", p, err)
		}
		out[c] = p[:i]
	}
	return out
}

// An image is pinned when its tag names a version and a digest fixes its
// content, so that `docker compose up` next year starts what was checked
// today (a tag alone can be pushed again).
var versionTag = regexp.MustCompile(`^v?\d+(\.\d+)+(-[A-Za-z0-9.]+)?$`)

var digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func pinned(image string) error {
	ref, dg, ok := strings.Cut(image, "@")
	if !ok || !digest.MatchString(dg) {
		return fmt.Errorf("image %q has no sha256 digest: pin one (NAME:TAG@sha256:...)", image)
	}
	name := ref[strings.LastIndexByte(ref, '/')+1:]
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok:
		return fmt.Errorf("image %q has no tag: name the version the digest is", image)
	case strings.HasPrefix(ref, "gcr.io/distroless/"):
		// Distroless publishes no version tags; the digest alone pins it.
	case !versionTag.MatchString(tag):
		return fmt.Errorf("image %q: tag %q is not a version: pin one (e.g. 1.2.3)", image, tag)
	}
	return nil
}

// Every image is pinned, except the one the stack builds: one service builds
// the Dockerfile, and any other service running that image reuses the build
// and never pulls it.
func TestImagesPinned(t *testing.T) {
	s := loadStack(t)
	var builders []string
	built := map[string]bool{}
	for name, svc := range s.compose.Services {
		if svc.Build != nil {
			builders = append(builders, name)
			built[svc.Image] = true
		}
	}
	if len(builders) != 1 || built[""] {
		t.Errorf("services building an image: %v; want one, naming its image, so the Dockerfile is built once", builders)
	}
	for name, svc := range s.compose.Services {
		switch {
		case svc.Build != nil:
			// Built here from the Dockerfile (checked by TestDockerfile).
		case svc.Image == "":
			t.Errorf("service %s has neither image nor build", name)
		case built[svc.Image]:
			if svc.PullPolicy != "never" {
				t.Errorf("service %s runs the built image %s with pull_policy %q; want never (it is in no registry)", name, svc.Image, svc.PullPolicy)
			}
		default:
			if err := pinned(svc.Image); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
	}
	dg := "@sha256:" + strings.Repeat("0a", 32)
	for _, bad := range []string{"apache/kafka", "apache/kafka:latest" + dg, "envoyproxy/envoy:dev" + dg, "apache/kafka:4.1.1", "apache/kafka" + dg, "apache/kafka:4.1.1@sha256:0a0a", "localhost:5000/x" + dg} {
		if pinned(bad) == nil {
			t.Errorf("pinned(%q) accepted it", bad)
		}
	}
	for _, good := range []string{"apache/kafka:4.1.1" + dg, "envoyproxy/envoy:v1.38.3" + dg, "localhost:5000/x:1.0" + dg, "gcr.io/distroless/cc-debian12:nonroot" + dg} {
		if err := pinned(good); err != nil {
			t.Errorf("pinned(%q): %v", good, err)
		}
	}
}

// Envoy must be a version with StreamedImmediateResponse and the fix for
// CVE-2026-47207 in the ext_proc filter, both in 1.37.5
// (docs/design.md#the-envoy-contract).
func TestEnvoyVersion(t *testing.T) {
	s := loadStack(t)
	image := s.compose.Services[envoySvc].Image
	_, tag, _ := strings.Cut(image, ":")
	var v [3]int
	if _, err := fmt.Sscanf(tag, "v%d.%d.%d", &v[0], &v[1], &v[2]); err != nil {
		t.Fatalf("envoy image %q: tag is not vMAJOR.MINOR.PATCH", image)
	}
	if slices.Compare(v[:], []int{1, 37, 5}) < 0 {
		t.Errorf("envoy image %q: need >= v1.37.5", image)
	}
}

func TestMountedFilesExist(t *testing.T) {
	s := loadStack(t)
	for name, svc := range s.compose.Services {
		for _, m := range mounts(svc) {
			if !strings.HasPrefix(m.host, "./") {
				t.Errorf("service %s: volume %q: mount files of this repository by ./path", name, m.host)
				continue
			}
			fi, err := os.Stat(filepath.Join(root, m.host))
			if err != nil {
				t.Errorf("service %s: %v", name, err)
				continue
			}
			if !fi.Mode().IsRegular() {
				t.Errorf("service %s: %s is not a file", name, m.host)
			}
			if m.options != "ro" {
				t.Errorf("service %s: mount %s read-only (:ro): the services only read it", name, m.host)
			}
		}
	}
}

// kafkaListeners reads the broker's listener settings: listener name →
// advertised host:port, and listener name → bound port.
func kafkaListeners(t *testing.T, env map[string]string) (advertised map[string]string, bound map[string]int) {
	t.Helper()
	split := func(key string) map[string]string {
		out := map[string]string{}
		for _, l := range strings.Split(env[key], ",") {
			name, addr, ok := strings.Cut(strings.TrimSpace(l), "://")
			if !ok {
				t.Fatalf("%s: %q is not NAME://host:port", key, l)
			}
			out[name] = addr
		}
		return out
	}
	advertised = split("KAFKA_ADVERTISED_LISTENERS")
	bound = map[string]int{}
	for name, addr := range split("KAFKA_LISTENERS") {
		bound[name] = port(t, addr)
	}
	return advertised, bound
}

// Every address the other services give the broker is an advertised listener
// reachable inside the compose network: its host is the Kafka service and the
// broker listens on its port. Otherwise librdkafka bootstraps, then follows
// the advertised address somewhere it cannot reach.
func TestKafkaListenersAgree(t *testing.T) {
	s := loadStack(t)
	k := s.compose.Services[kafkaSvc]
	advertised, bound := kafkaListeners(t, k.Environment)
	protocols := map[string]string{}
	for _, pair := range strings.Split(k.Environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ",") {
		name, proto, _ := strings.Cut(pair, ":")
		protocols[name] = proto
	}
	internal := func(what, addr, protocol string) {
		t.Helper()
		for name, adv := range advertised {
			if adv != addr {
				continue
			}
			host, _, _ := net.SplitHostPort(adv)
			if host != kafkaSvc && host != k.Hostname {
				t.Errorf("%s %s: listener %s is advertised as %s, which other containers cannot resolve", what, addr, name, adv)
			}
			if bound[name] != port(t, adv) {
				t.Errorf("%s %s: listener %s binds port %d, advertises %s", what, addr, name, bound[name], adv)
			}
			if protocols[name] != protocol {
				t.Errorf("%s %s: listener %s speaks %s, the client %s", what, addr, name, protocols[name], protocol)
			}
			return
		}
		t.Errorf("%s %s is not one of the advertised listeners %v", what, addr, advertised)
	}

	if len(s.cfg.Kafka) == 0 {
		t.Fatal("the processor's configuration has no kafka binding")
	}
	for name, kc := range s.cfg.Kafka {
		protocol := kc.Properties["security.protocol"]
		if protocol == "" {
			protocol = "PLAINTEXT"
		}
		for _, addr := range strings.Split(kc.Properties["bootstrap.servers"], ",") {
			internal("kafka binding "+name+" bootstrap.servers", strings.TrimSpace(addr), strings.ToUpper(protocol))
		}
	}
	internal("kafka-topics BOOTSTRAP", s.compose.Services[topicsSvc].Environment["BOOTSTRAP"], "PLAINTEXT")

	voters := k.Environment["KAFKA_CONTROLLER_QUORUM_VOTERS"]
	if _, addr, _ := strings.Cut(voters, "@"); port(t, addr) != bound[k.Environment["KAFKA_CONTROLLER_LISTENER_NAMES"]] {
		t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS %q does not name the controller listener's port", voters)
	}
	if v := k.Environment["KAFKA_AUTO_CREATE_TOPICS_ENABLE"]; v != "false" {
		t.Errorf("KAFKA_AUTO_CREATE_TOPICS_ENABLE %q: want false, so that only kafka-topics creates topics", v)
	}
	if _, ok := advertised[k.Environment["KAFKA_INTER_BROKER_LISTENER_NAME"]]; !ok {
		t.Errorf("KAFKA_INTER_BROKER_LISTENER_NAME %q is not an advertised listener", k.Environment["KAFKA_INTER_BROKER_LISTENER_NAME"])
	}
}

// Envoy's config and the compose file agree: Envoy publishes its listener
// ports, dials the processor service on the port it listens on, and that
// port stays unpublished (it trusts its peer). envoy.yaml passes the same
// checks as `kafka-ext-proc validate --envoy`, with the mounted configuration's
// limits.
func TestEnvoyAgrees(t *testing.T) {
	s := loadStack(t)
	b, err := envoy.Load(s.envoyHost)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoy.Validate(b); err != nil {
		t.Fatal(err)
	}
	if err := envoy.Check(b, envoy.CheckOptions{MaxWait: s.cfg.Limits.MaxWait, ReplyTimeout: s.cfg.Limits.ReplyTimeout, PingMinTime: stack.KeepaliveMinTime}); err != nil {
		t.Fatal(err)
	}

	envoyPorts := published(t, s.compose.Services[envoySvc])
	for _, l := range b.GetStaticResources().GetListeners() {
		p := int(l.GetAddress().GetSocketAddress().GetPortValue())
		if _, ok := envoyPorts[p]; !ok {
			t.Errorf("envoy listener %q port %d is not published (ports %q)", l.GetName(), p, s.compose.Services[envoySvc].Ports)
		}
	}

	settings, err := envoy.SettingsFrom(b)
	if err != nil {
		t.Fatal(err)
	}
	proc := s.compose.Services[processorSvc]
	listen := port(t, flagValue(t, proc.Command, "--listen"))
	var endpoints []string
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() != settings.ExtProc.ClusterName {
			continue
		}
		for _, le := range cl.GetLoadAssignment().GetEndpoints() {
			for _, ep := range le.GetLbEndpoints() {
				sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
				endpoints = append(endpoints, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
			}
		}
	}
	if want := []string{net.JoinHostPort(processorSvc, strconv.Itoa(listen))}; !slices.Equal(endpoints, want) {
		t.Errorf("envoy cluster %q endpoints %v, want %v (service %s, --listen port)", settings.ExtProc.ClusterName, endpoints, want, processorSvc)
	}
	procPorts := published(t, proc)
	if _, ok := procPorts[listen]; ok {
		t.Errorf("the processor's ext_proc port %d is published: only Envoy may reach it", listen)
	}
	admin := port(t, flagValue(t, proc.Command, "--admin"))
	if proc.Healthcheck == nil || port(t, flagValue(t, proc.Healthcheck.Test, "--admin")) != admin {
		t.Errorf("the processor's health check does not probe its --admin port %d", admin)
	}
	if host := procPorts[admin]; host != "" && !strings.HasPrefix(host, "127.0.0.1:") {
		t.Errorf("admin port published on %q: keep it on the host's loopback", host)
	}
}

// The start order: Kafka healthy → topics created → processor ready → Envoy;
// a condition on health needs a health check to wait for.
func TestStartOrder(t *testing.T) {
	s := loadStack(t)
	want := map[string]map[string]string{
		topicsSvc:    {kafkaSvc: "service_healthy"},
		processorSvc: {topicsSvc: "service_completed_successfully"},
		envoySvc:     {processorSvc: "service_healthy"},
	}
	for svc, deps := range want {
		for dep, cond := range deps {
			if got := s.compose.Services[svc].DependsOn[dep].Condition; got != cond {
				t.Errorf("%s depends_on %s: condition %q, want %q", svc, dep, got, cond)
			}
		}
	}
	for name, svc := range s.compose.Services {
		for dep, d := range svc.DependsOn {
			target := s.compose.Services[dep]
			if target == nil {
				t.Errorf("%s depends on undefined service %s", name, dep)
				continue
			}
			if d.Condition == "service_healthy" && (target.Healthcheck == nil || len(target.Healthcheck.Test) == 0) {
				t.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
			}
		}
	}
}

// createdTopics reads the topic-creation script: topic → compacted.
func createdTopics(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "create" {
			continue
		}
		if _, dup := out[fields[1]]; dup {
			t.Errorf("%s creates %s twice", path, fields[1])
		}
		out[fields[1]] = slices.Contains(fields, "cleanup.policy=compact")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// kafka-topics creates exactly the static topics the configuration names,
// compacted where `dev` compacts them (topics read by http-kafka fetch
// routes): the same list `kafka-ext-proc dev` gives its embedded broker.
func TestTopicsCreated(t *testing.T) {
	s := loadStack(t)
	topics := s.compose.Services[topicsSvc]
	script := hostFileFor(t, topics, topics.Command[len(topics.Command)-1])
	got := createdTopics(t, script)
	want := map[string]bool{}
	for _, tp := range stack.TopicsOf(s.cfg) {
		want[tp.Name] = tp.Compact
	}
	for name, compact := range want {
		switch c, ok := got[name]; {
		case !ok:
			t.Errorf("%s does not create %s, which %s names", script, name, s.cfgHost)
		case c != compact:
			t.Errorf("%s creates %s with compaction %v, want %v", script, name, c, compact)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s creates %s, which %s does not name", script, name, s.cfgHost)
		}
	}
	if len(want) == 0 {
		t.Error("the configuration names no topic")
	}
}
