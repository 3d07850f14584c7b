package kafkaroute

import (
	"strings"
	"testing"
	"time"
)

// A key's use is the key and the caller: two callers never share one, and
// the order guards are listed in does not matter.
func TestKeySlot(t *testing.T) {
	a := KeySlot("k1", map[string]string{"jwt0": "alice", "jwt1": "x"})
	if len(a) != 32 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("use %q is not 32 hex digits", a)
	}
	if again := KeySlot("k1", map[string]string{"jwt1": "x", "jwt0": "alice"}); again != a {
		t.Errorf("the same key and caller: %s then %s", a, again)
	}
	for what, other := range map[string]string{
		"another key":    KeySlot("k2", map[string]string{"jwt0": "alice", "jwt1": "x"}),
		"another caller": KeySlot("k1", map[string]string{"jwt0": "bob", "jwt1": "x"}),
		"no caller":      KeySlot("k1", nil),
		"shifted fields": KeySlot("k1jwt0", map[string]string{"": "alice", "jwt1": "x"}),
	} {
		if other == a {
			t.Errorf("%s shares the use %s", what, a)
		}
	}
	u := &KeyUse{Slot: a}
	if h := string(u.Header("0f")); h != a+".0f" {
		t.Errorf("header %q", h)
	}
}

// The refusal names the key, the topic and what may differ, and says what
// to do.
func TestKeyReusedError(t *testing.T) {
	err := &KeyReusedError{Key: "order-1", Topic: "orders", First: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), What: "its body"}
	want := `idempotency key "order-1" was used at 2026-01-02T03:04:05Z for another request to topic "orders"; this one differs in its body. Nothing was written: repeat the first request unchanged to get its answer, or send this one with a new idempotency key`
	if err.Error() != want {
		t.Errorf("%s\nwant\n%s", err, want)
	}
}
