// Package buildinfo reads what the Go toolchain stamped into the binary:
// the module version and the VCS commit it was built from.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info describes the running binary.
type Info struct {
	Version   string // module version, "(devel)" for a plain build of a work tree
	Commit    string // VCS revision, "unknown" when not stamped (go test, go run)
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string
}

// revision is the commit a build names when the toolchain cannot stamp one:
// the image build's context has no .git, so the Dockerfile passes its
// REVISION argument with -ldflags "-X <this package>.revision=…". Only the
// linker sets it.
var revision string

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	return From(bi, revision)
}

// From extracts Info from build information; linked is the commit the linker
// was given, used when the toolchain stamped none.
func From(bi *debug.BuildInfo, linked string) Info {
	info := Info{Version: bi.Main.Version, Commit: "unknown", GoVersion: bi.GoVersion}
	if linked != "" {
		info.Commit = linked
	}
	if info.Version == "" {
		info.Version = "unknown"
	}
	if info.GoVersion == "" {
		info.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one line `version` prints.
func (i Info) String() string {
	commit := i.Commit
	if i.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("kafka-ext-proc %s, commit %s, %s", i.Version, commit, i.GoVersion)
}
