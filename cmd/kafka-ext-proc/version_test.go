package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/buildinfo"
)

func TestVersionCommandAndFlag(t *testing.T) {
	want := buildinfo.Read().String() + "\n"
	for _, arg := range []string{"version", "--version"} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{arg}, &stdout, &stderr); code != 0 || stdout.String() != want {
			t.Errorf("%s: exit %d, %q, want %q (stderr %q)", arg, code, stdout.String(), want, stderr.String())
		}
	}
}
