package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestDescribe(t *testing.T) {
	for _, name := range []string{"full", "minimal"} {
		t.Run(name, func(t *testing.T) {
			cfg := loadValid(t, name+".yaml")
			var buf bytes.Buffer
			Describe(cfg, &buf)
			golden := filepath.Join("testdata", "describe", name+".txt")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("Describe:\n%s\nwant (%s; go test -update rewrites it):\n%s", buf.Bytes(), golden, want)
			}
		})
	}
}
