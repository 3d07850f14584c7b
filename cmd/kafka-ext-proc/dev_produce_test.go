package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/readmetest"
)

// readmeCurls extracts the curl lines of the README's "Try it" section, so
// what the README shows is what the test runs.
func readmeCurls(t *testing.T) []readmetest.Curl {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Try it\n")
	if !ok {
		t.Fatal(`README.md has no "### Try it" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var out []readmetest.Curl
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "curl ") {
			continue
		}
		c, err := readmetest.ParseCurl(line)
		if err != nil {
			t.Fatalf("README line %q: %v", line, err)
		}
		out = append(out, c)
	}
	return out
}

// The README's produce lines against `dev` with the bundled demo: create,
// read, update through POST, delete, a synchronous request-reply, an async
// one and its follow-up, and a replay of the synchronous one.
func TestDevReadmeProduceLines(t *testing.T) {
	front, _ := devRun(t)
	checkReadmeProduceLines(t, front)
}

// checkReadmeProduceLines runs the README's curl lines against the front
// (an emulator in front of a processor running the bundled demo, with its
// http-echo responder) and checks every answer.
func checkReadmeProduceLines(t *testing.T, front string) {
	t.Helper()
	cmds := readmeCurls(t)
	client := &http.Client{Timeout: 30 * time.Second}
	run := func(c readmetest.Curl, url string) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if c.Body != "" {
			body = strings.NewReader(c.Body)
		}
		req, err := http.NewRequest(c.Method, url, body)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range c.Headers {
			req.Header.Add(h[0], h[1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.Line, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	var location, syncReply string
	var syncCmd *readmetest.Curl
	covered := map[string]bool{}
	for _, c := range cmds {
		url := strings.Replace(c.URL, "127.0.0.1:8080", front, 1)
		path := strings.TrimPrefix(c.URL, "http://127.0.0.1:8080")
		if strings.Contains(url, "cid=CID") {
			if location == "" {
				t.Fatalf("%s: no 202 with a location came before", c.Line)
			}
			url = "http://" + front + location
		}
		resp, body := run(c, url)
		async := false
		for _, h := range c.Headers {
			async = async || strings.EqualFold(h[0], "prefer") && strings.Contains(h[1], "respond-async")
		}
		switch {
		case strings.HasPrefix(path, "/items") && c.Method != http.MethodGet:
			covered[c.Method+" items"] = true
			if resp.StatusCode != http.StatusNoContent {
				t.Errorf("%s: %d %q, want 204", c.Line, resp.StatusCode, body)
			}
		case strings.HasPrefix(path, "/items/") && c.Method == http.MethodGet:
			covered["GET item"] = true
			var v map[string]any
			if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || resp.Header.Get("etag") == "" {
				t.Errorf("%s: %d %q, want 200 with the JSON written", c.Line, resp.StatusCode, body)
			}
		case strings.HasPrefix(path, "/orders/") && async:
			covered["async"] = true
			location = resp.Header.Get("location")
			if resp.StatusCode != http.StatusAccepted || !strings.Contains(location, ";cid=") {
				t.Errorf("%s: %d %v, want 202 + location", c.Line, resp.StatusCode, resp.Header)
			}
		case strings.HasPrefix(path, "/orders/") && c.Method == http.MethodPost:
			covered["sync"] = true
			syncReply, syncCmd = body, &c
			if resp.StatusCode != http.StatusCreated || !strings.Contains(body, c.Body) || resp.Header.Get("content-type") != "application/json" {
				t.Errorf("%s: %d %q, want the responder's 201 echoing the request", c.Line, resp.StatusCode, body)
			}
		case strings.Contains(path, ";cid="):
			covered["follow-up"] = true
			if resp.StatusCode != http.StatusCreated || !strings.Contains(body, `"qty":2`) {
				t.Errorf("%s: %d %q, want the reply of the async request", c.Line, resp.StatusCode, body)
			}
		default:
			t.Errorf("%s: the test does not know what this line should answer", c.Line)
		}
		t.Logf("%s → %d", c.Line, resp.StatusCode)
	}
	for _, want := range []string{"PUT items", "POST items", "DELETE items", "GET item", "sync", "async", "follow-up"} {
		if !covered[want] {
			t.Errorf("the README's Try it section has no %s line", want)
		}
	}

	// The delete took effect, and the synchronous request is idempotent.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, _ := run(readmetest.Curl{Method: http.MethodGet}, "http://"+front+"/items/1")
		if resp.StatusCode == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /items/1 after the DELETE: %d, want 404", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if syncCmd != nil {
		if resp, body := run(*syncCmd, strings.Replace(syncCmd.URL, "127.0.0.1:8080", front, 1)); resp.StatusCode != http.StatusCreated || body != syncReply {
			t.Errorf("the repeated %s: %d %q, want the stored reply %q", syncCmd.Line, resp.StatusCode, body, syncReply)
		}
	}
}
