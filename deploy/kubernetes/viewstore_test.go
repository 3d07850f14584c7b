package kubernetes

import (
	"testing"
)

// The processor's one writable place is the views volume, mounted where
// the configuration's view-store directory points: an emptyDir by default,
// a claim per pod as the option; any other volume kind is refused.
func TestChartMountsTheViewStoreVolume(t *testing.T) {
	r, err := renderChart(chartDir, nil)
	if err != nil {
		t.Fatal(err)
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
	_, err = renderChart(chartDir, map[string]any{"viewStore": map[string]any{"volume": "hostPath"}})
	wantErr(t, err, "viewStore.volume must be emptyDir or persistentVolumeClaim")
}
