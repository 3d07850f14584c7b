package kubernetes

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const (
	chartDir = "chart"
	// The release the setups' READMEs install: its Service is
	// kafka-ext-proc.kafka-ext-proc.svc.
	release   = "kafka-ext-proc"
	namespace = "kafka-ext-proc"
)

// rendered is the chart rendered and decoded, with the processor
// configuration its ConfigMap holds.
type rendered struct {
	deployment  *appsv1.Deployment  // nil when the views' claims need a StatefulSet
	statefulSet *appsv1.StatefulSet // nil otherwise
	service     *corev1.Service
	configMap   *corev1.ConfigMap
	secret      *corev1.Secret // nil with credentials.existingSecret
	pdb         *policyv1.PodDisruptionBudget
	cfg         *config.Config
}

// pod is the processor's pod template, whichever workload carries it.
func (r *rendered) pod() *corev1.PodTemplateSpec {
	if r.statefulSet != nil {
		return &r.statefulSet.Spec.Template
	}
	return &r.deployment.Spec.Template
}

// workload names the rendered workload and gives its pod selector.
func (r *rendered) workload() (string, *metav1.LabelSelector) {
	if r.statefulSet != nil {
		return "StatefulSet " + r.statefulSet.Name, r.statefulSet.Spec.Selector
	}
	return "Deployment " + r.deployment.Name, r.deployment.Spec.Selector
}

// checkOptions are the processor limits and keepalive policy an Envoy in
// front of this release must respect, as `validate --envoy` takes them.
func (r *rendered) checkOptions() envoy.CheckOptions {
	return envoy.CheckOptions{MaxWait: r.cfg.Limits.MaxWait, ReplyTimeout: r.cfg.Limits.ReplyTimeout, PingMinTime: stack.KeepaliveMinTime}
}

// grpcAddress is where the release's processors take ext_proc streams.
func (r *rendered) grpcAddress(fqdn bool) (string, uint32) {
	host := r.service.Name
	if fqdn {
		host = fmt.Sprintf("%s.%s.svc.cluster.local", r.service.Name, namespace)
	}
	for _, p := range r.service.Spec.Ports {
		if p.Name == "grpc" {
			return host, uint32(p.Port)
		}
	}
	return host, 0
}

// lintChart runs Helm's linter over the chart directory; warnings fail it
// as errors do (helm lint --strict).
func lintChart(dir string, values map[string]any) error {
	l := lint.All(dir, values, namespace, false)
	var errs []error
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			errs = append(errs, m.Err)
		}
	}
	return errors.Join(errs...)
}

// renderChart renders the chart with Helm's engine and decodes what it
// makes strictly, then checks it (checkRendered).
func renderChart(dir string, values map[string]any) (*rendered, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart: %w", err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering the chart: %w", err)
	}
	var objs []any
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if filepath.Ext(name) != ".yaml" {
			continue
		}
		os, err := decodeAll([]byte(files[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		objs = append(objs, os...)
	}
	r := &rendered{}
	// One workload runs the processor: a Deployment or a StatefulSet.
	deployments, statefulSets := all[*appsv1.Deployment](objs), all[*appsv1.StatefulSet](objs)
	if len(deployments)+len(statefulSets) != 1 {
		return nil, fmt.Errorf("%d Deployments and %d StatefulSets, want one of them", len(deployments), len(statefulSets))
	}
	if len(deployments) == 1 {
		r.deployment = deployments[0]
	} else {
		r.statefulSet = statefulSets[0]
	}
	if r.service, err = only[*corev1.Service](objs); err != nil {
		return nil, err
	}
	if r.configMap, err = only[*corev1.ConfigMap](objs); err != nil {
		return nil, err
	}
	if r.pdb, err = only[*policyv1.PodDisruptionBudget](objs); err != nil {
		return nil, err
	}
	if s, err := only[*corev1.Secret](objs); err == nil {
		r.secret = s
	}
	return r, checkRendered(r)
}

func probePath(p *corev1.Probe) string {
	if p == nil || p.HTTPGet == nil {
		return ""
	}
	return p.HTTPGet.Path
}

// flag is the value of --name=value in args.
func flag(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// checkRendered checks what docs/deploy.md relies on: probes on the admin
// port, a grace period covering the drain, a headless Service on the gRPC
// port, a PDB and Service selecting the pods, the configuration mounted
// from the ConfigMap and valid with the credentials from the Secret, and
// resource requests.
func checkRendered(r *rendered) error {
	var errs []error
	problem := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	pod := r.pod()
	workload, selector := r.workload()
	if len(pod.Spec.Containers) != 1 {
		return fmt.Errorf("%s has %d containers, want 1", workload, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if got := probePath(c.StartupProbe); got != "/readyz" {
		problem("startup probe path %q, want /readyz (views caught up)", got)
	}
	if got := probePath(c.ReadinessProbe); got != "/readyz" {
		problem("readiness probe path %q, want /readyz", got)
	}
	if got := probePath(c.LivenessProbe); got != "/healthz" {
		problem("liveness probe path %q, want /healthz", got)
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.String() != "admin" {
			problem("probe %s on port %q, want the admin port", p.HTTPGet.Path, p.HTTPGet.Port.String())
		}
	}
	if c.LivenessProbe != nil && c.StartupProbe == nil {
		problem("a liveness probe without a startup probe restarts replicas still catching up")
	}

	// The drain: serve turns NOT_SERVING, serves drain-delay more, then
	// drains for up to grace; the kubelet must not kill it before.
	var drain time.Duration
	for _, name := range []string{"drain-delay", "grace"} {
		v, ok := flag(c.Args, name)
		if !ok {
			problem("serve has no --%s", name)
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			problem("--%s: %v", name, err)
		}
		drain += d
	}
	if tg := pod.Spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= drain {
		problem("terminationGracePeriodSeconds %v does not exceed drain-delay + grace (%s): the kubelet would kill a drain in progress", tg, drain)
	}

	if r.service.Spec.ClusterIP != corev1.ClusterIPNone {
		problem("service clusterIP %q: a standalone Envoy's STRICT_DNS needs a headless Service to spread streams over the replicas", r.service.Spec.ClusterIP)
	}
	podLabels := labels.Set(pod.Labels)
	if selector == nil || !labels.SelectorFromSet(selector.MatchLabels).Matches(podLabels) || len(selector.MatchLabels) == 0 {
		problem("%s selector %v does not select its pods %v", workload, selector, pod.Labels)
	}
	if r.statefulSet != nil && r.statefulSet.Spec.ServiceName != r.service.Name {
		problem("%s serviceName %q is not the chart's Service %q", workload, r.statefulSet.Spec.ServiceName, r.service.Name)
	}
	if err := checkVolumes(r); err != nil {
		problem("%s: %v", workload, err)
	}
	if !labels.SelectorFromSet(r.service.Spec.Selector).Matches(podLabels) || len(r.service.Spec.Selector) == 0 {
		problem("service selector %v does not select the pods %v", r.service.Spec.Selector, pod.Labels)
	}
	if sel := r.pdb.Spec.Selector; sel == nil || !labels.SelectorFromSet(sel.MatchLabels).Matches(podLabels) || len(sel.MatchLabels) == 0 {
		problem("PodDisruptionBudget selector %v does not select the pods %v", r.pdb.Spec.Selector, pod.Labels)
	}
	if _, port := r.grpcAddress(false); port == 0 {
		problem("service has no port named grpc")
	} else if listen, _ := flag(c.Args, "listen"); !strings.HasSuffix(listen, fmt.Sprintf(":%d", port)) {
		problem("serve --listen=%s is not the service's grpc port %d", listen, port)
	}

	// The configuration: the file serve reads is the ConfigMap's key.
	cfgPath, _ := flag(c.Args, "config")
	var mounted bool
	for _, m := range c.VolumeMounts {
		if filepath.Dir(cfgPath) != m.MountPath {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == r.configMap.Name {
				mounted = true
			}
		}
	}
	data, ok := r.configMap.Data[filepath.Base(cfgPath)]
	if !mounted || !ok {
		problem("--config=%s is not the ConfigMap %q mounted (keys %v)", cfgPath, r.configMap.Name, slices.Sorted(maps.Keys(r.configMap.Data)))
	}
	// Environment from the Secret: every secretKeyRef names a key it has.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if r.secret == nil || r.secret.Name != ref.Name {
				problem("env %s reads Secret %q, which the chart does not make", e.Name, ref.Name)
				continue
			}
			v, ok := r.secret.StringData[ref.Key]
			if !ok {
				problem("env %s reads key %q, which Secret %q lacks", e.Name, ref.Key, ref.Name)
			}
			env[e.Name] = v
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		}
	}
	cfg, err := config.Parse(cfgPath, []byte(data), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		problem("the ConfigMap's configuration: %v", err)
	} else {
		r.cfg = cfg
	}

	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		problem("no CPU or memory request: the scheduler cannot place the views' memory")
	}
	if lim := c.Resources.Limits.Memory(); !lim.IsZero() && lim.Cmp(*c.Resources.Requests.Memory()) < 0 {
		problem("memory limit %s below the request %s", lim, c.Resources.Requests.Memory())
	}
	return errors.Join(errs...)
}

// checkVolumes checks that every mount of the processor names a volume its
// pod gets: one of the pod's own, or one of the StatefulSet's claims.
func checkVolumes(r *rendered) error {
	have := map[string]bool{}
	for _, v := range r.pod().Spec.Volumes {
		have[v.Name] = true
	}
	if r.statefulSet != nil {
		for _, c := range r.statefulSet.Spec.VolumeClaimTemplates {
			if have[c.Name] {
				return fmt.Errorf("volume %q is both the pod's and a claim template", c.Name)
			}
			have[c.Name] = true
		}
	}
	var errs []error
	for _, m := range r.pod().Spec.Containers[0].VolumeMounts {
		if !have[m.Name] {
			errs = append(errs, fmt.Errorf("mount %q at %s has no volume", m.Name, m.MountPath))
		}
	}
	return errors.Join(errs...)
}

func TestChartLintsAndRenders(t *testing.T) {
	if err := lintChart(chartDir, nil); err != nil {
		t.Fatalf("helm lint: %v", err)
	}
	r, err := renderChart(chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.secret == nil {
		t.Error("no Secret rendered for the Kafka credentials")
	}
	// With an existing Secret the chart makes none and points at it.
	if _, err := renderChart(chartDir, map[string]any{"credentials": map[string]any{"existingSecret": "mine"}}); err == nil || !strings.Contains(err.Error(), `reads Secret "mine"`) {
		t.Errorf("existingSecret: %v, want the env to read Secret \"mine\" (and the check to say it is not rendered)", err)
	}
}

// copyChart copies the chart to a temporary directory with one file edited.
func copyChart(t *testing.T, file string, pairs ...string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "chart")
	if err := os.CopyFS(dst, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dst, file)
	if err := os.WriteFile(p, edited(t, readFile(t, p), pairs...), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// Each check of the chart fails on a broken copy or broken values.
func TestChartChecksFail(t *testing.T) {
	t.Run("lint: Chart.yaml without a version", func(t *testing.T) {
		wantErr(t, lintChart(copyChart(t, "Chart.yaml", "version: 0.1.0\n", ""), nil), "version")
	})
	t.Run("render: template error", func(t *testing.T) {
		_, err := renderChart(copyChart(t, "templates/pdb.yaml", "{{ .Values.podDisruptionBudget.maxUnavailable }}", "{{ .Values.podDisruptionBudget.maxUnavailable | nosuchfunc }}"), nil)
		wantErr(t, err, "nosuchfunc")
	})
	t.Run("strict decoding: unknown field", func(t *testing.T) {
		_, err := renderChart(copyChart(t, "templates/deployment.yaml", "  replicas: {{ .Values.replicas }}", "  replica: {{ .Values.replicas }}"), nil)
		wantErr(t, err, `unknown field "replica"`)
	})
	cases := []struct {
		name   string
		file   string
		pairs  []string
		values map[string]any
		want   string
	}{
		{"grace period below the drain", "", nil, map[string]any{"drain": map[string]any{"terminationMargin": -5}}, "does not exceed drain-delay + grace"},
		{"drain durations not whole seconds", "", nil, map[string]any{"drain": map[string]any{"grace": "1m"}}, "whole seconds"},
		{"no startup probe", "templates/_pod.tpl", []string{"    startupProbe:\n      httpGet: { path: /readyz, port: admin }\n      periodSeconds: {{ .Values.startupProbe.periodSeconds }}\n      failureThreshold: {{ .Values.startupProbe.failureThreshold }}\n", ""}, nil, "a liveness probe without a startup probe"},
		{"readiness on liveness", "templates/_pod.tpl", []string{"httpGet: { path: /readyz, port: admin }\n      periodSeconds: 5", "httpGet: { path: /healthz, port: admin }\n      periodSeconds: 5"}, nil, `readiness probe path "/healthz"`},
		{"service not headless", "", nil, map[string]any{"service": map[string]any{"headless": false}}, "a standalone Envoy's STRICT_DNS needs a headless Service"},
		{"invalid configuration", "", nil, map[string]any{"config": "bindings: {}\nlimits: { max-wait: soon }\n"}, "the ConfigMap's configuration"},
		{"secret key missing", "templates/secret.yaml", []string{"  password: {{ .Values.credentials.password | quote }}\n", ""}, nil, `reads key "password"`},
		{"pdb selecting nothing", "templates/pdb.yaml", []string{"      {{- include \"kep.selector\" . | nindent 6 }}", "      app: other"}, nil, "PodDisruptionBudget selector"},
		{"no requests", "", nil, map[string]any{"resources": map[string]any{"requests": nil}}, "no CPU or memory request"},
		{"deployment selecting other pods", "templates/deployment.yaml", []string{"      {{- include \"kep.selector\" . | nindent 6 }}", "      app: other"}, nil, "Deployment kafka-ext-proc selector"},
		{"statefulSet selecting other pods", "templates/statefulset.yaml", []string{"      {{- include \"kep.selector\" . | nindent 6 }}", "      app: other"}, statefulSetValues, "StatefulSet kafka-ext-proc selector"},
		{"statefulSet on another service", "templates/statefulset.yaml", []string{"  serviceName: {{ include \"kep.name\" . }}", "  serviceName: other"}, statefulSetValues, `serviceName "other" is not the chart's Service`},
		{"statefulSet without the views claim", "templates/statefulset.yaml", []string{"      name: views\n", "      name: store\n"}, statefulSetValues, `mount "views" at /var/lib/kafka-ext-proc/views has no volume`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := chartDir
			if tc.file != "" {
				dir = copyChart(t, tc.file, tc.pairs...)
			}
			_, err := renderChart(dir, tc.values)
			wantErr(t, err, tc.want)
		})
	}
}
