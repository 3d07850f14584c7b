package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every field of Limits has one key, a default, a row in
// docs/configuration.md, and is decoded from that key: a limit added to
// one of them and not the others fails here.
func TestEveryLimitIsDocumentedAndDecoded(t *testing.T) {
	keys := limitKeys()
	typ := reflect.TypeOf(Limits{})
	if len(keys) != typ.NumField() {
		t.Fatalf("%d limit keys for %d fields of Limits", len(keys), typ.NumField())
	}
	fields := map[uintptr]string{}
	var l Limits
	for _, k := range keys {
		p := reflect.ValueOf(k.field(&l)).Pointer()
		if other, dup := fields[p]; dup {
			t.Errorf("%s and %s set the same field", k.key, other)
		}
		fields[p] = k.key
	}

	documented := documentedLimits(t)
	for _, k := range keys {
		if !documented[k.key] {
			t.Errorf("limit %s is not in the Limits table of docs/configuration.md", k.key)
		}
		delete(documented, k.key)
	}
	for key := range documented {
		t.Errorf("docs/configuration.md documents limit %s, which the loader does not decode", key)
	}

	// Each key, set to a value other than its default, changes its field
	// and no other.
	def := DefaultLimits()
	for _, k := range keys {
		value := map[limitKind]string{sizeLimit: "3KiB", durationLimit: "7s", durationOrNone: "0s", countLimit: "3"}[k.kind]
		cfg, err := Parse("l.yaml", []byte(fmt.Sprintf("bindings: {}\nlimits: { %s: %s }\n", k.key, value)), nil)
		if err != nil {
			t.Fatalf("%s: %v", k.key, err)
		}
		want := def
		switch p := k.field(&want).(type) {
		case *int64:
			*p = 3 << 10
		case *time.Duration:
			*p = map[limitKind]time.Duration{durationLimit: 7 * time.Second, durationOrNone: 0}[k.kind]
		case *int:
			*p = 3
		}
		if want == def {
			t.Fatalf("%s: the test value is the default", k.key)
		}
		if cfg.Limits != want {
			t.Errorf("limits: { %s: %s } decodes to %+v, want %+v", k.key, value, cfg.Limits, want)
		}
	}
}

// A configuration built by hand gets the defaults for the limits it leaves
// at zero, except one whose zero means none.
func TestLimitsWithDefaults(t *testing.T) {
	got := Limits{MaxBody: 64}.WithDefaults()
	want := DefaultLimits()
	want.MaxBody, want.StreamSendInterval = 64, 0
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
}

// documentedLimits are the keys of the Limits table of
// docs/configuration.md.
func documentedLimits(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Limits\n")
	if !ok {
		t.Fatal("docs/configuration.md has no Limits section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(section, -1) {
		out[m[1]] = true
	}
	if len(out) == 0 {
		t.Fatal("no limits in the Limits table of docs/configuration.md")
	}
	return out
}
