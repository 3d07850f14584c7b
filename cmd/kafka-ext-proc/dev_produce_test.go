package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// curlCmd is one curl line of the README: the parts a test can replay.
type curlCmd struct {
	line    string
	method  string
	url     string
	headers [][2]string
	body    string
}

// readmeCurls extracts the curl lines of the README's "Try it" section, so
// what the README shows is what the test runs.
func readmeCurls(t *testing.T) []curlCmd {
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
	var out []curlCmd
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "curl ") {
			continue
		}
		c, err := parseCurl(line)
		if err != nil {
			t.Fatalf("README line %q: %v", line, err)
		}
		out = append(out, c)
	}
	return out
}

// parseCurl reads the curl options the README uses (-i, -X, -H, -d) from a
// line of single-quoted shell words.
func parseCurl(line string) (curlCmd, error) {
	words, err := shellWords(line)
	if err != nil {
		return curlCmd{}, err
	}
	c := curlCmd{line: line, method: http.MethodGet}
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s needs an argument", w)
			}
			i++
			return words[i], nil
		}
		switch {
		case w == "-i":
		case w == "-X":
			if c.method, err = arg(); err != nil {
				return c, err
			}
		case w == "-H":
			h, err := arg()
			if err != nil {
				return c, err
			}
			name, value, ok := strings.Cut(h, ":")
			if !ok {
				return c, fmt.Errorf("header %q has no ':'", h)
			}
			c.headers = append(c.headers, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
		case w == "-d":
			if c.body, err = arg(); err != nil {
				return c, err
			}
			if c.method == http.MethodGet {
				c.method = http.MethodPost // as curl does
			}
		case strings.HasPrefix(w, "http://"):
			c.url = w
		default:
			return c, fmt.Errorf("unexpected curl argument %q", w)
		}
	}
	if c.url == "" {
		return c, fmt.Errorf("no URL")
	}
	return c, nil
}

// shellWords splits a line into words: blanks separate, single quotes
// quote, a word starting with # ends the line.
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quoted && ch == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(ch)
		case ch == '\'':
			quoted, in = true, true
		case ch == ' ' || ch == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case ch == '#' && !in:
			return words, nil
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote")
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// The README's produce lines against `dev` with the bundled demo: create,
// read, update through POST, delete, a synchronous request-reply, an async
// one and its follow-up, and a replay of the synchronous one.
func TestDevReadmeProduceLines(t *testing.T) {
	cmds := readmeCurls(t)
	front, _ := devRun(t)
	client := &http.Client{Timeout: 30 * time.Second}
	run := func(c curlCmd, url string) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, url, body)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range c.headers {
			req.Header.Add(h[0], h[1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	var location, syncReply string
	var syncCmd *curlCmd
	covered := map[string]bool{}
	for _, c := range cmds {
		url := strings.Replace(c.url, "127.0.0.1:8080", front, 1)
		path := strings.TrimPrefix(c.url, "http://127.0.0.1:8080")
		if strings.Contains(url, "cid=CID") {
			if location == "" {
				t.Fatalf("%s: no 202 with a location came before", c.line)
			}
			url = "http://" + front + location
		}
		resp, body := run(c, url)
		async := false
		for _, h := range c.headers {
			async = async || strings.EqualFold(h[0], "prefer") && strings.Contains(h[1], "respond-async")
		}
		switch {
		case strings.HasPrefix(path, "/items") && c.method != http.MethodGet:
			covered[c.method+" items"] = true
			if resp.StatusCode != http.StatusNoContent {
				t.Errorf("%s: %d %q, want 204", c.line, resp.StatusCode, body)
			}
		case strings.HasPrefix(path, "/items/") && c.method == http.MethodGet:
			covered["GET item"] = true
			var v map[string]any
			if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || resp.Header.Get("etag") == "" {
				t.Errorf("%s: %d %q, want 200 with the JSON written", c.line, resp.StatusCode, body)
			}
		case strings.HasPrefix(path, "/orders/") && async:
			covered["async"] = true
			location = resp.Header.Get("location")
			if resp.StatusCode != http.StatusAccepted || !strings.Contains(location, ";cid=") {
				t.Errorf("%s: %d %v, want 202 + location", c.line, resp.StatusCode, resp.Header)
			}
		case strings.HasPrefix(path, "/orders/") && c.method == http.MethodPost:
			covered["sync"] = true
			syncReply, syncCmd = body, &c
			if resp.StatusCode != http.StatusCreated || !strings.Contains(body, c.body) || resp.Header.Get("content-type") != "application/json" {
				t.Errorf("%s: %d %q, want the responder's 201 echoing the request", c.line, resp.StatusCode, body)
			}
		case strings.Contains(path, ";cid="):
			covered["follow-up"] = true
			if resp.StatusCode != http.StatusCreated || !strings.Contains(body, `"qty":2`) {
				t.Errorf("%s: %d %q, want the reply of the async request", c.line, resp.StatusCode, body)
			}
		default:
			t.Errorf("%s: the test does not know what this line should answer", c.line)
		}
		t.Logf("%s → %d", c.line, resp.StatusCode)
	}
	for _, want := range []string{"PUT items", "POST items", "DELETE items", "GET item", "sync", "async", "follow-up"} {
		if !covered[want] {
			t.Errorf("the README's Try it section has no %s line", want)
		}
	}

	// The delete took effect, and the synchronous request is idempotent.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, _ := run(curlCmd{method: http.MethodGet}, "http://"+front+"/items/1")
		if resp.StatusCode == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /items/1 after the DELETE: %d, want 404", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if syncCmd != nil {
		if resp, body := run(*syncCmd, strings.Replace(syncCmd.url, "127.0.0.1:8080", front, 1)); resp.StatusCode != http.StatusCreated || body != syncReply {
			t.Errorf("the repeated %s: %d %q, want the stored reply %q", syncCmd.line, resp.StatusCode, body, syncReply)
		}
	}
}

func TestParseCurl(t *testing.T) {
	c, err := parseCurl(`curl -i -X POST 'http://h/x;cid=1' -H 'content-type: application/json' -H 'prefer: respond-async, wait=5' -d '{"a": 1}'   # note`)
	if err != nil || c.method != "POST" || c.url != "http://h/x;cid=1" || c.body != `{"a": 1}` || len(c.headers) != 2 ||
		c.headers[1] != [2]string{"prefer", "respond-async, wait=5"} {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := parseCurl(`curl 'http://h/' -d 'x'`); err != nil || c.method != "POST" {
		t.Errorf("-d without -X: %+v %v", c, err)
	}
	for _, bad := range []string{`curl -X`, `curl 'http://h`, `curl --data x http://h`, `curl -i`} {
		if _, err := parseCurl(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
