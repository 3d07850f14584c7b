package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// devRun starts `kafka-ext-proc dev` with args as a user would (the same
// entry point, flags and output) and returns the addresses its banner names.
func devRun(t *testing.T, args ...string) (front, kafkaAddr string) {
	t.Helper()
	front, kafkaAddr, _, _ = devStart(t, args...)
	return front, kafkaAddr
}

// devBaseArgs are dev's arguments with free ports for what args do not
// set; with --processor dev runs the emulator alone.
func devBaseArgs(args []string) []string {
	base := []string{"dev", "--front", "127.0.0.1:0", "--log-level", "warn"}
	if slices.Contains(args, "--processor") {
		return base
	}
	base = append(base, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	if !slices.Contains(args, "--kafka") {
		base = append(base, "--kafka", "127.0.0.1:0")
	}
	return base
}

// withoutFront is base without its --front and the address after it, so
// that dev chooses its front as it does for a user.
func withoutFront(base []string) []string {
	i := slices.Index(base, "--front")
	if i < 0 {
		return base
	}
	return slices.Delete(slices.Clone(base), i, i+2)
}

// devStart is devRun that also returns the banner's lines and a stop that
// ends dev before the test does (it runs at cleanup otherwise).
func devStart(t *testing.T, args ...string) (front, kafkaAddr string, banner []string, stop func()) {
	t.Helper()
	return devStartBase(t, devBaseArgs(args), args...)
}

// devStartBase is devStart with the arguments that come before args given:
// a test that plays a configuration on the ports a user would see passes
// base arguments without --front.
func devStartBase(t *testing.T, base []string, args ...string) (front, kafkaAddr string, banner []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, append(slices.Clone(base), args...), w, io.Discard)
		w.Close()
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		go io.Copy(io.Discard, out) //nolint:errcheck // drain the banner's tail
		if code := <-exited; code != 0 {
			t.Errorf("dev exited with %d", code)
		}
	}
	t.Cleanup(stop)
	frontRe := regexp.MustCompile(`front \(Envoy emulator\): http://(\S+)`)
	kafkaRe := regexp.MustCompile(`Kafka \((?:embedded|existing)\):\s+(\S+)`)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		banner = append(banner, line)
		if m := frontRe.FindStringSubmatch(line); m != nil {
			front = m[1]
		}
		if m := kafkaRe.FindStringSubmatch(line); m != nil {
			kafkaAddr = m[1]
		}
		if strings.HasPrefix(line, "Ctrl-C") {
			break
		}
	}
	if front == "" || (kafkaAddr == "" && !slices.Contains(args, "--processor")) {
		t.Fatalf("dev printed no addresses:\n%s", strings.Join(banner, "\n"))
	}
	return front, kafkaAddr, banner, stop
}

// The README quick start: `dev` runs the demo; a record written with a Kafka
// client is served with an ETag, and a long poll on that ETag is answered
// within 5 s of the next write.
func TestDevQuickStart(t *testing.T) {
	front, kafkaAddr := devRun(t)

	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": kafkaAddr, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	put := func(key, value string) {
		topic := "items-snapshots"
		done := make(chan kafka.Event, 1)
		err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key: []byte(key), Value: []byte(value), Headers: []kafka.Header{{Key: "content-type", Value: []byte("application/json")}}}, done)
		if err != nil {
			t.Fatal(err)
		}
		if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}
	getItem := func(hdr ...string) (*http.Response, string) {
		return call(t, http.MethodGet, "http://"+front+"/items/1", "", hdr...)
	}

	put("1", `{"name":"pen"}`)
	// The view reads the record shortly after the acknowledgement: long-poll
	// for it rather than guess when.
	resp, body := getItem("prefer", "wait=5")
	if resp.StatusCode != 200 || body != `{"name":"pen"}` || resp.Header.Get("etag") == "" || resp.Header.Get("content-type") != "application/json" {
		t.Fatalf("GET /items/1: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	etag := resp.Header.Get("etag")

	answered := make(chan struct{})
	var lpResp *http.Response
	var lpBody string
	go func() {
		defer close(answered)
		lpResp, lpBody = getItem("if-none-match", etag, "prefer", "wait=30")
	}()
	// Whether the write lands before or after the poll registers, the poll's
	// answer is the new record: its tag no longer matches.
	wrote := time.Now()
	put("1", `{"name":"pencil"}`)
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll was not answered within 5 s of the write")
	}
	if lpResp.StatusCode != 200 || lpBody != `{"name":"pencil"}` || lpResp.Header.Get("etag") == etag {
		t.Fatalf("long poll: %d %q %v", lpResp.StatusCode, lpBody, lpResp.Header)
	}
	t.Logf("long poll answered %v after the write", time.Since(wrote))
}

// call sends one request (headers as name, value pairs) and returns the
// answer and its body.
func call(t *testing.T, method, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, string(b)
}
