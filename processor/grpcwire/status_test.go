package grpcwire

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestIsGRPCContentType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc":        true,
		"application/grpc+proto":  true,
		"application/grpc+json":   true,
		"application/grpc-web":    false,
		"application/grpcx":       false,
		"application/json":        false,
		"":                        false,
		"application/grpc-web+pb": false,
	} {
		if got := IsGRPCContentType(ct); got != want {
			t.Errorf("IsGRPCContentType(%q) = %v", ct, got)
		}
	}
}

func TestEncodeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "",
		"plain text ok":      "plain text ok",
		"100% sure":          "100%25 sure",
		"line\nbreak":        "line%0Abreak",
		"tilde~ stays":       "tilde~ stays", // 0x7E is in gRPC's unencoded range (0x20-0x7E, % excepted)
		"caf\u00e9":          "caf%C3%A9",
		"\x7f":               "%7F",
		"topic \"items\": 5": "topic \"items\": 5",
	} {
		if got := EncodeMessage(in); got != want {
			t.Errorf("EncodeMessage(%q) = %q, want %q", in, got, want)
		}
		if back := DecodeMessage(EncodeMessage(in)); back != in {
			t.Errorf("round trip of %q = %q", in, back)
		}
	}
	// Receivers keep malformed escapes.
	if got := DecodeMessage("50%zz%4"); got != "50%zz%4" {
		t.Errorf("DecodeMessage kept %q", got)
	}
	if got := DecodeMessage("%e2%82%ac"); got != "\u20ac" {
		t.Errorf("lower-case hex: %q", got)
	}
}

func FuzzEncodeMessage(f *testing.F) {
	f.Add("hello % world\n\u00e9")
	f.Fuzz(func(t *testing.T, s string) {
		enc := EncodeMessage(s)
		for i := 0; i < len(enc); i++ {
			if enc[i] < 0x20 || enc[i] > 0x7e {
				t.Fatalf("byte %#x left unencoded", enc[i])
			}
		}
		if DecodeMessage(enc) != s {
			t.Fatal("round trip failed")
		}
	})
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1S":        time.Second,
		"100m":      100 * time.Millisecond,
		"5M":        5 * time.Minute,
		"2H":        2 * time.Hour,
		"7u":        7 * time.Microsecond,
		"99999999n": 99999999,
		"99999999H": time.Duration(1<<63 - 1),
	} {
		got, err := ParseTimeout(in)
		if err != nil || got != want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "S", "1", "123456789S", "1s", "-1S", "1.5S", " 1S"} {
		if _, err := ParseTimeout(in); err == nil {
			t.Errorf("ParseTimeout(%q) accepted", in)
		}
	}
}

func TestStatusMapping(t *testing.T) {
	for c, want := range map[codes.Code]int{
		codes.OK: 200, codes.InvalidArgument: 400, codes.Unauthenticated: 401, codes.PermissionDenied: 403,
		codes.NotFound: 404, codes.ResourceExhausted: 429, codes.Unimplemented: 501, codes.Unavailable: 503,
		codes.DeadlineExceeded: 504, codes.Internal: 500, codes.Canceled: 499,
	} {
		if got := HTTPStatus(c); got != want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c, got, want)
		}
	}
	for s, want := range map[int]codes.Code{
		400: codes.Internal, 401: codes.Unauthenticated, 403: codes.PermissionDenied, 404: codes.Unimplemented,
		429: codes.Unavailable, 502: codes.Unavailable, 503: codes.Unavailable, 504: codes.Unavailable,
		500: codes.Unknown, 200: codes.Unknown,
	} {
		if got := CodeFromHTTP(s); got != want {
			t.Errorf("CodeFromHTTP(%d) = %v, want %v", s, got, want)
		}
	}
	if CodeName(codes.ResourceExhausted) != "RESOURCE_EXHAUSTED" || CodeName(codes.Canceled) != "CANCELLED" || CodeName(99) != "CODE_99" {
		t.Error("CodeName")
	}
}
