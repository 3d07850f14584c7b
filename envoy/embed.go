package envoy

import _ "embed"

//go:embed envoy.yaml
var defaultYAML []byte

// DefaultYAML returns the envoy.yaml shipped with the project, which `dev`
// hands to the emulator unless told otherwise.
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }
