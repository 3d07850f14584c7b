package processor

import "testing"

func TestAnswerLabelsSeparateHTTPAndGRPCCodes(t *testing.T) {
	for _, c := range []struct{ kind, status, outcome, code, grpcCode string }{
		{"http", "200", outcomeOK, "200", labelNone},
		{"http", "304", outcomeOK, "304", labelNone},
		{"http", "404", outcomeClientError, "404", labelNone},
		{"http", "503", outcomeServerError, "503", labelNone},
		{"grpc", "OK", outcomeOK, labelNone, "OK"},
		{"grpc", "NOT_FOUND", outcomeClientError, labelNone, "NOT_FOUND"},
		{"grpc", "UNAVAILABLE", outcomeServerError, labelNone, "UNAVAILABLE"},
	} {
		o, code, g := answerLabels(c.kind, c.status)
		if o != c.outcome || code != c.code || g != c.grpcCode {
			t.Errorf("%s %s: outcome %s code %s grpc_code %s, want %s %s %s", c.kind, c.status, o, code, g, c.outcome, c.code, c.grpcCode)
		}
	}
}
