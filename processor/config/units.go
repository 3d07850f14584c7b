package config

import (
	"fmt"
	"math/big"
	"regexp"
	"time"
)

var sizeRe = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?) ?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$`)

// sizeUnit is the number of bytes of a unit accepted by sizeRe.
func sizeUnit(u string) int64 {
	switch u {
	case "KB":
		return 1000
	case "MB":
		return 1000 * 1000
	case "GB":
		return 1000 * 1000 * 1000
	case "TB":
		return 1000 * 1000 * 1000 * 1000
	case "KiB":
		return 1 << 10
	case "MiB":
		return 1 << 20
	case "GiB":
		return 1 << 30
	case "TiB":
		return 1 << 40
	}
	return 1 // "" or "B"
}

const sizeHelp = "use a number of bytes or a number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 512KiB, 1MiB)"

// ParseSize parses a human-readable byte size: a plain number of bytes or a
// number with a decimal (KB = 1000) or binary (KiB = 1024) unit. Fractions are
// allowed when the result is a whole number of bytes (1.5KiB = 1536).
func ParseSize(s string) (int64, error) {
	m := sizeRe.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("invalid size %q: %s", s, sizeHelp)
	}
	// Exact arithmetic: a float would round 1.1GB to a neighbour.
	r, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("invalid size %q: %s", s, sizeHelp)
	}
	r.Mul(r, new(big.Rat).SetInt64(sizeUnit(m[2])))
	if !r.IsInt() {
		return 0, fmt.Errorf("invalid size %q: it is not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return r.Num().Int64(), nil
}

// ParseDuration parses a duration with units (30s, 1m30s, 250ms). A bare
// number is refused: seconds or milliseconds would both be plausible.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		if isNumber(s) {
			return 0, fmt.Errorf("invalid duration %q: add a unit: ms, s, m or h (e.g. %ss)", s, s)
		}
		return 0, fmt.Errorf("invalid duration %q: use a number with a unit: ms, s, m or h (e.g. 30s, 1m30s)", s)
	}
	return d, nil
}

func isNumber(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return s != ""
}

// FormatSize renders a byte count with the largest binary unit that divides it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}
