package e2e_test

import (
	"fmt"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/buildinfo"
)

// /metrics names the running build.
func TestBuildInfoMetric(t *testing.T) {
	t.Parallel()
	e := startEnv(t, fmt.Sprintf(secureConfig, yamlMap(nil)), withAdmin)
	bi := buildinfo.Read()
	mfs := e.scrapeNow()
	if !has(mfs, "kafka_ext_proc_build_info", map[string]string{"version": bi.Version, "commit": bi.Commit, "go_version": bi.GoVersion}) {
		t.Fatalf("kafka_ext_proc_build_info: %v", mfs["kafka_ext_proc_build_info"])
	}
	if v := mfs["kafka_ext_proc_build_info"].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Fatalf("kafka_ext_proc_build_info = %v, want 1", v)
	}
}
