package config

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func fuzzEnv(name string) (string, bool) {
	if name == "SET" {
		return "v", true
	}
	return "", false
}

// FuzzParse: Parse never panics, and every error it returns carries a
// position inside the input and a message. What it accepts, Describe prints.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*", "*.yaml"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	for _, tc := range ruleCases {
		f.Add([]byte(tc.yaml))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data, fuzzEnv)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without error")
			}
			checkInvariants(t, cfg)
			Describe(cfg, io.Discard)
			return
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error is not Errors: %#v", err)
		}
		lines := bytes.Split(data, []byte("\n"))
		for i, e := range errs {
			if e.Pos.File != "fuzz.yaml" || e.Msg == "" {
				t.Fatalf("bad error %q", e)
			}
			if e.Pos.Line < 1 || e.Pos.Line > len(lines) {
				t.Fatalf("%q: line outside the input (%d lines)", e, len(lines))
			}
			// Columns count characters; bytes are an upper bound.
			if e.Pos.Col < 1 || e.Pos.Col > len(lines[e.Pos.Line-1])+1 {
				t.Fatalf("%q: column outside line %q", e, lines[e.Pos.Line-1])
			}
			if i > 0 && (e.Pos.Line < errs[i-1].Pos.Line || e.Pos.Line == errs[i-1].Pos.Line && e.Pos.Col < errs[i-1].Pos.Col) {
				t.Fatalf("errors out of file order: %q after %q", e, errs[i-1])
			}
		}
	})
}

// checkInvariants asserts what code built on a loaded Config relies on.
func checkInvariants(t *testing.T, cfg *Config) {
	t.Helper()
	for _, b := range cfg.Bindings {
		if (b.Type == HTTPKafka) != (b.HTTP != nil) || (b.Type == GRPCKafka) != (b.GRPC != nil) {
			t.Fatalf("binding %s: options do not match type %s", b.Name, b.Type)
		}
		for i, r := range b.Routes {
			if r.Index != i || r.With == nil || cfg.Kafka[r.Exit] == nil {
				t.Fatalf("binding %s route %d: %+v", b.Name, i, r)
			}
			for _, g := range r.Guarded {
				if cfg.Guards[g.Guard] == nil {
					t.Fatalf("route guarded by undefined %s", g.Guard)
				}
			}
			if r.With.Topic.Raw == "" || !r.With.Topic.Static() && r.With.TopicPattern == "" {
				t.Fatalf("route %d topic %+v", i, r.With.Topic)
			}
			if r.With.Capability == Produce && r.With.Acks == "" {
				t.Fatalf("route %d without acks", i)
			}
		}
	}
	for _, g := range cfg.Guards {
		if g.JWT == nil || g.Type == "jwt" && len(g.JWT.Keys) == 0 {
			t.Fatalf("guard %s: %+v", g.Name, g.JWT)
		}
	}
}
