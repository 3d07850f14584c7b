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

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", Commit: "unknown", GoVersion: runtime.Version()}
	}
	return From(bi)
}

// From extracts Info from build information.
func From(bi *debug.BuildInfo) Info {
	info := Info{Version: bi.Main.Version, Commit: "unknown", GoVersion: bi.GoVersion}
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
