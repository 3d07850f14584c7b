//go:build !nodev

package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/readmetest"
)

// The README's "Several replicas" lines: dev --replicas 2, four requests
// through the front, and each replica's /metrics counts two of them, as
// Envoy's round robin spreads them.
func TestDevReplicasRoundRobin(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := readmetest.Parse(string(b), "### Several replicas")
	if err != nil {
		t.Fatal(err)
	}
	var banner []string
	readmetest.Run(t, steps, readmetest.Env{Root: repoRoot, Start: func(t *testing.T, args []string) (string, string) {
		if len(args) == 0 || args[0] != "dev" {
			t.Fatalf("the start command is not `go run ./cmd/kafka-ext-proc dev ...`: %q", args)
		}
		front, kafkaAddr, lines, _ := devStart(t, args[1:]...)
		banner = lines
		return front, kafkaAddr
	}})
	metricsRe := regexp.MustCompile(`replica \d+ \(ext_proc\):\s+\S+\s+admin: (http://\S+/metrics)`)
	var counts []int
	for _, l := range banner {
		if m := metricsRe.FindStringSubmatch(l); m != nil {
			counts = append(counts, exchanges(t, m[1]))
		}
	}
	requests := len(steps) - 1
	if len(counts) != 2 {
		t.Fatalf("the banner lists %d replicas' metrics, want 2:\n%s", len(counts), strings.Join(banner, "\n"))
	}
	for i, n := range counts {
		if n != requests/2 {
			t.Errorf("replica %d answered %d requests, want %d of %d (counts %v)", i+1, n, requests/2, requests, counts)
		}
	}
}

// exchanges sums kafka_ext_proc_exchanges_total on a replica's /metrics.
func exchanges(t *testing.T, url string) int {
	t.Helper()
	_, body := call(t, "GET", url, "")
	total := 0
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "kafka_ext_proc_exchanges_total") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", url, sc.Text(), err)
		}
		total += int(v)
	}
	return total
}
