package config

import "testing"

// The fingerprint header is named after the correlation-id header, so a
// binding whose headers were renamed writes no gateway: name.
func TestFingerprintHeaderName(t *testing.T) {
	for cid, want := range map[string]string{
		"gateway:correlation-id": "gateway:fingerprint",
		"zilla:correlation-id":   "zilla:fingerprint",
		"a:b:correlation-id":     "a:b:fingerprint",
		"x-cid":                  "x-cid-fingerprint",
	} {
		if got := (CorrelationHeaders{CorrelationID: cid}).Fingerprint(); got != want {
			t.Errorf("correlation-id header %s: fingerprint header %s, want %s", cid, got, want)
		}
	}
}
