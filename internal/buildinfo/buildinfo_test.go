package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromReadsVersionAndCommit(t *testing.T) {
	got := From(&debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/kafka-ext-proc/kafka-ext-proc", Version: "v1.2.3"},
		Settings:  []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}},
	}, "ffff0000") // what the toolchain stamped wins over what the linker was given
	if want := (Info{Version: "v1.2.3", Commit: "0123abcd", Modified: true, GoVersion: "go1.26.8"}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if s := got.String(); s != "kafka-ext-proc v1.2.3, commit 0123abcd (modified), go1.26.8" {
		t.Fatalf("String() = %q", s)
	}
	if got := From(&debug.BuildInfo{}, ""); got.Version != "unknown" || got.Commit != "unknown" || got.GoVersion == "" {
		t.Fatalf("nothing stamped: %+v", got)
	}
	// The image build: no .git in its context, the commit passed to the linker.
	if got := From(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "0123abcd"); got.Commit != "0123abcd" || got.Modified {
		t.Fatalf("commit given to the linker: %+v", got)
	}
}
