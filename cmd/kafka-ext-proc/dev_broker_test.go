package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// devBanner starts dev and returns its banner as one text.
func devBanner(t *testing.T, args ...string) (banner string, stop func()) {
	t.Helper()
	_, _, lines, stop := devStart(t, args...)
	return strings.Join(lines, "\n") + "\n", stop
}

func bannerAddr(t *testing.T, banner, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("banner has no %s:\n%s", re, banner)
	}
	return m[1]
}

// With --data, records written before a restart are served
// after it.
func TestDevDataKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	do := func(front, method, path, body string, hdr ...string) (int, string) {
		t.Helper()
		resp, b := call(t, method, "http://"+front+path, body, hdr...)
		return resp.StatusCode, b
	}

	banner, stop := devBanner(t, "--data", dir)
	if !strings.Contains(banner, dir+" (kept across restarts)") {
		t.Fatalf("banner does not name the data directory:\n%s", banner)
	}
	front := bannerAddr(t, banner, `front \(Envoy emulator\): http://(\S+)`)
	if code, body := do(front, "PUT", "/items/1", `{"name":"kept"}`, "content-type", "application/json"); code/100 != 2 {
		t.Fatalf("PUT /items/1: %d %s", code, body)
	}
	if code, body := do(front, "GET", "/items/1", "", "prefer", "wait=5"); code != 200 || body != `{"name":"kept"}` {
		t.Fatalf("GET /items/1 before the restart: %d %q", code, body)
	}
	stop()

	banner, _ = devBanner(t, "--data", dir)
	front = bannerAddr(t, banner, `front \(Envoy emulator\): http://(\S+)`)
	if code, body := do(front, "GET", "/items/1", ""); code != 200 || body != `{"name":"kept"}` {
		t.Fatalf("GET /items/1 after the restart: %d %q", code, body)
	}
}

// Without --data nothing is kept: the check above can fail.
func TestDevWithoutDataForgets(t *testing.T) {
	banner, stop := devBanner(t)
	front := bannerAddr(t, banner, `front \(Envoy emulator\): http://(\S+)`)
	if resp, body := call(t, "PUT", "http://"+front+"/items/1", `{"name":"gone"}`, "content-type", "application/json"); resp.StatusCode/100 != 2 {
		t.Fatalf("PUT /items/1: %d %q", resp.StatusCode, body)
	}
	stop()
	banner, _ = devBanner(t)
	front = bannerAddr(t, banner, `front \(Envoy emulator\): http://(\S+)`)
	resp, _ := call(t, "GET", "http://"+front+"/items/1", "")
	if resp.StatusCode != 404 {
		t.Fatalf("GET /items/1 after a restart without --data: %d, want 404", resp.StatusCode)
	}
}

// --partitions sets the partitions of the topics dev creates, --topic adds
// topics; the banner's grpcurl lines name the shipped protos.
func TestDevPartitionsTopicsAndGRPCLines(t *testing.T) {
	banner, _ := devBanner(t, "--partitions", "3", "--topic", "t-extra:5", "--topic", "t-plain")
	kafkaAddr := bannerAddr(t, banner, `Kafka \(embedded\):\s+(\S+)`)
	front := bannerAddr(t, banner, `front \(Envoy emulator\): http://(\S+)`)
	md := clusterMetadata(t, kafkaAddr)
	for topic, want := range map[string]int{"items-snapshots": 3, "orders-requests": 3, "t-extra": 5, "t-plain": 3} {
		if got := len(md.Topics[topic].Partitions); got != want {
			t.Errorf("%s: %d partitions, want %d", topic, got, want)
		}
	}
	for _, want := range []string{
		"grpcurl -plaintext -import-path proto/example -proto echo.proto -d '{\"message\":\"hello\"}' " + front + " example.Echo/Say",
		"grpcurl -plaintext -import-path proto/example -proto fanout.proto -d '{}' " + front + " example.Fanout/Subscribe",
		"grpcurl -plaintext -import-path proto/example -proto fanout.proto -d '{\"id\":\"hello\",\"text\":\"hello\"}' " + front + " example.Fanout/Publish",
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %s", want)
		}
	}
	if strings.Contains(banner, "YOUR.proto") {
		t.Errorf("banner still says YOUR.proto:\n%s", banner)
	}
	if t.Failed() {
		t.Log(banner)
	}
}

// clusterMetadata asks the cluster at bootstrap for the metadata of all its
// topics, a request that creates none.
func clusterMetadata(t *testing.T, bootstrap string) *kafka.Metadata {
	t.Helper()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	md, err := admin.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return md
}
