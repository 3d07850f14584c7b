package envoy

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
)

//go:embed envoy.yaml
var defaultYAML []byte

// DefaultYAML returns the envoy.yaml shipped with the project, which `dev`
// hands to the emulator unless told otherwise.
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }

// Uncommented returns an envoy.yaml with the commented blocks named
// (between "# >>> name" and "# <<< name") uncommented, so that tests and
// users can turn on the optional parts the shipped file carries.
func Uncommented(data []byte, names ...string) ([]byte, error) {
	lines := strings.Split(string(data), "\n")
	for _, name := range names {
		begin := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "# >>> "+name })
		end := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "# <<< "+name })
		if begin < 0 || end < begin {
			return nil, fmt.Errorf("envoy.yaml has no commented block %q", name)
		}
		for i := begin + 1; i < end; i++ {
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
			rest, ok := strings.CutPrefix(lines[i][indent:], "# ")
			if !ok {
				return nil, fmt.Errorf("envoy.yaml block %q line %d is not commented with \"# \"", name, i+1)
			}
			lines[i] = lines[i][:indent] + rest
		}
	}
	return []byte(strings.Join(lines, "\n")), nil
}
