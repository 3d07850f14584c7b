package kubernetes

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// statefulSetValues keep each replica's view store on a claim of its own.
var statefulSetValues = map[string]any{"viewStore": map[string]any{"volume": "statefulSet"}}

// The processor's one writable place is the views volume, mounted where
// the configuration's view-store directory points: an emptyDir by default,
// a claim per pod as an option.
func TestChartMountsTheViewStoreVolume(t *testing.T) {
	r, err := renderChart(chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.deployment == nil || r.statefulSet != nil {
		t.Fatalf("default workload: Deployment %v, StatefulSet %v; want the Deployment alone", r.deployment != nil, r.statefulSet != nil)
	}
	pod := r.deployment.Spec.Template.Spec
	mounted := false
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.Name == "views" && m.MountPath == "/var/lib/kafka-ext-proc/views" && !m.ReadOnly {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("no writable views mount: %+v", pod.Containers[0].VolumeMounts)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil || *pod.SecurityContext.FSGroup != 65532 {
		t.Error("the views volume is not given to the processor's group (fsGroup)")
	}
	views := func(r *rendered) (found bool, emptyDir, claim bool) {
		for _, v := range r.deployment.Spec.Template.Spec.Volumes {
			if v.Name == "views" {
				return true, v.EmptyDir != nil, v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil
			}
		}
		return false, false, false
	}
	if found, emptyDir, _ := views(r); !found || !emptyDir {
		t.Errorf("default views volume: found %v, emptyDir %v", found, emptyDir)
	}
	r, err = renderChart(chartDir, map[string]any{"viewStore": map[string]any{"volume": "persistentVolumeClaim",
		"persistentVolumeClaim": map[string]any{"storageClassName": "fast", "size": "100Gi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if found, _, claim := views(r); !found || !claim {
		t.Fatalf("persistentVolumeClaim views volume: found %v, claim %v", found, claim)
	}
	for _, v := range r.deployment.Spec.Template.Spec.Volumes {
		if v.Name != "views" {
			continue
		}
		spec := v.Ephemeral.VolumeClaimTemplate.Spec
		if spec.StorageClassName == nil || *spec.StorageClassName != "fast" || spec.Resources.Requests.Storage().String() != "100Gi" {
			t.Errorf("claim: %+v", spec)
		}
	}
}

// withoutViews is a copy of the pod template without its views volume: the
// one part a Deployment and a StatefulSet of the chart may differ in.
func withoutViews(pod *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	p := pod.DeepCopy()
	p.Spec.Volumes = nil
	for _, v := range pod.Spec.Volumes {
		if v.Name != "views" {
			p.Spec.Volumes = append(p.Spec.Volumes, v)
		}
	}
	return p
}

// With viewStore.volume statefulSet, each replica's store is a claim of a
// StatefulSet's volumeClaimTemplates, which outlives the pod: a rolling
// update or a drained node replaces the pod, and its successor (same
// ordinal) mounts the same claim. The pod is the Deployment's, the views
// volume apart, and the Service and PodDisruptionBudget select it.
func TestChartStatefulSetKeepsEachReplicasViewStore(t *testing.T) {
	store := func(volume string) map[string]any {
		return map[string]any{"viewStore": map[string]any{"volume": volume, "mountPath": "/data/views",
			"persistentVolumeClaim": map[string]any{"storageClassName": "fast", "size": "100Gi"}}}
	}
	if err := lintChart(chartDir, store("statefulSet")); err != nil {
		t.Fatalf("helm lint: %v", err)
	}
	d, err := renderChart(chartDir, store("emptyDir"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := renderChart(chartDir, store("statefulSet"))
	if err != nil {
		t.Fatal(err)
	}
	if r.statefulSet == nil || r.deployment != nil {
		t.Fatalf("workload: StatefulSet %v, Deployment %v; want the StatefulSet alone", r.statefulSet != nil, r.deployment != nil)
	}
	sts := r.statefulSet.Spec
	if len(sts.VolumeClaimTemplates) != 1 || sts.VolumeClaimTemplates[0].Name != "views" {
		t.Fatalf("claim templates %+v, want one named views", sts.VolumeClaimTemplates)
	}
	claim := sts.VolumeClaimTemplates[0].Spec
	if claim.StorageClassName == nil || *claim.StorageClassName != "fast" {
		t.Errorf("claim storage class %v, want fast", claim.StorageClassName)
	}
	if got := claim.Resources.Requests.Storage().String(); got != "100Gi" {
		t.Errorf("claim size %s, want 100Gi", got)
	}
	if len(claim.AccessModes) != 1 || claim.AccessModes[0] != corev1.ReadWriteOnce {
		t.Errorf("claim access modes %v, want [ReadWriteOnce]: one store, one process", claim.AccessModes)
	}
	mounted := false
	for _, m := range sts.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "views" && m.MountPath == "/data/views" && !m.ReadOnly)
	}
	if !mounted {
		t.Errorf("the claim is not mounted writable at viewStore.mountPath: %+v", sts.Template.Spec.Containers[0].VolumeMounts)
	}
	for _, v := range sts.Template.Spec.Volumes {
		if v.Name == "views" {
			t.Errorf("the pod has its own views volume %+v besides the claim", v)
		}
	}
	if sts.ServiceName != r.service.Name || sts.PodManagementPolicy != appsv1.ParallelPodManagement || sts.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("serviceName %q (Service %q), podManagementPolicy %q, updateStrategy %q; want the chart's Service, Parallel, RollingUpdate",
			sts.ServiceName, r.service.Name, sts.PodManagementPolicy, sts.UpdateStrategy.Type)
	}
	if sts.Replicas == nil || d.deployment.Spec.Replicas == nil || *sts.Replicas != *d.deployment.Spec.Replicas {
		t.Errorf("replicas %v, the Deployment's %v", sts.Replicas, d.deployment.Spec.Replicas)
	}
	podLabels := labels.Set(sts.Template.Labels)
	if !labels.SelectorFromSet(r.pdb.Spec.Selector.MatchLabels).Matches(podLabels) || !labels.SelectorFromSet(r.service.Spec.Selector).Matches(podLabels) {
		t.Errorf("PodDisruptionBudget %v or Service %v does not select the StatefulSet's pods %v", r.pdb.Spec.Selector.MatchLabels, r.service.Spec.Selector, podLabels)
	}
	if want, got := withoutViews(&d.deployment.Spec.Template), withoutViews(&sts.Template); !equality.Semantic.DeepEqual(want, got) {
		w, _ := yaml.Marshal(want)
		g, _ := yaml.Marshal(got)
		t.Errorf("the StatefulSet's pod differs from the Deployment's apart from the views volume:\nDeployment:\n%s\nStatefulSet:\n%s", w, g)
	}
}

// A view store the chart cannot make is refused when rendering, with what
// to set.
func TestChartRefusesInconsistentViewStores(t *testing.T) {
	claim := func(volume string, size any) map[string]any {
		return map[string]any{"viewStore": map[string]any{"volume": volume, "persistentVolumeClaim": map[string]any{"size": size}}}
	}
	cases := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"unknown volume", map[string]any{"viewStore": map[string]any{"volume": "hostPath"}}, `viewStore.volume must be emptyDir, persistentVolumeClaim or statefulSet, got "hostPath"`},
		{"statefulSet claim without a size", claim("statefulSet", ""), "viewStore.volume statefulSet makes a claim for each replica's view store: set viewStore.persistentVolumeClaim.size"},
		{"statefulSet claim with a null size", claim("statefulSet", nil), "set viewStore.persistentVolumeClaim.size"},
		{"pod claim without a size", claim("persistentVolumeClaim", ""), "viewStore.volume persistentVolumeClaim makes a claim for each replica's view store"},
		{"size not a quantity", claim("statefulSet", "lots"), `viewStore.persistentVolumeClaim.size must be a quantity like 50Gi, got "lots"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(chartDir, tc.values)
			wantErr(t, err, tc.want)
		})
	}
}
