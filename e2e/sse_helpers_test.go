package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
)

// sseEvent is one event as the HTML standard's EventSource dispatches it.
type sseEvent struct {
	typ  string // "message" unless an event field said otherwise
	id   string // the last event id after it
	data string
}

// sseStream is an event stream read as EventSource reads it (the parsing
// rules of the HTML standard, "Interpreting an event stream"), plus the
// comments and the retry hint, which EventSource keeps to itself.
type sseStream struct {
	resp     *http.Response
	events   chan sseEvent
	comments chan string
	retry    chan string
	done     chan struct{} // closed when the body ends
	err      error         // why it ended; read after done
	cancel   context.CancelFunc
}

// openSSE sends a GET for an event stream; hdr are name, value pairs.
// Without an accept among them it sends accept: text/event-stream.
func (e *env) openSSE(c *http.Client, path string, hdr ...string) *sseStream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "accept") {
			req.Header.Del("accept")
		}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	// The streams outlive the clients' whole-request timeout.
	sc := &http.Client{Transport: c.Transport}
	resp, err := sc.Do(req)
	if err != nil {
		cancel()
		e.t.Fatalf("GET %s: %v", path, err)
	}
	s := &sseStream{resp: resp, events: make(chan sseEvent, 10000), comments: make(chan string, 1000),
		retry: make(chan string, 10), done: make(chan struct{}), cancel: cancel}
	e.t.Cleanup(s.close)
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		go s.read()
	} else {
		close(s.done)
	}
	return s
}

func (s *sseStream) close() {
	s.cancel()
	_ = s.resp.Body.Close()
}

// problem reads an answer that is not a stream as problem+json.
func (s *sseStream) problem(t *testing.T) handler.Problem {
	t.Helper()
	body := s.body(t)
	var p handler.Problem
	if ct := s.resp.Header.Get("content-type"); ct != "application/problem+json" {
		t.Fatalf("%d with content-type %q, not a problem: %s", s.resp.StatusCode, ct, body)
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem %s: %v", body, err)
	}
	return p
}

// body reads the whole body of an answer that is not a stream.
func (s *sseStream) body(t *testing.T) string {
	t.Helper()
	b, err := io.ReadAll(s.resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (s *sseStream) read() { s.readFrom(s.resp.Body) }

// readFrom parses an event stream until r ends.
func (s *sseStream) readFrom(r io.Reader) {
	defer close(s.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	sc.Split(scanSSELines)
	var typ, data, lastID string
	hasData := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if hasData {
				if typ == "" {
					typ = "message"
				}
				s.events <- sseEvent{typ: typ, id: lastID, data: strings.TrimSuffix(data, "\n")}
			}
			typ, data, hasData = "", "", false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			s.comments <- value
		case "event":
			typ = value
		case "data":
			data += value + "\n"
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				lastID = value
			}
		case "retry":
			s.retry <- value
		}
	}
	s.err = sc.Err()
}

// scanSSELines splits on CRLF, LF or CR, as the format does.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	for i, c := range data {
		switch c {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // a CR at the end: is LF next?
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// next waits (bounded) for the next event.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-s.done:
		select {
		case ev := <-s.events:
			return ev
		default:
		}
		t.Fatalf("the stream ended (%v) before the next event", s.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return sseEvent{}
}

// take waits for n events.
func (s *sseStream) take(t *testing.T, n int) []sseEvent {
	t.Helper()
	out := make([]sseEvent, 0, n)
	for len(out) < n {
		out = append(out, s.next(t))
	}
	return out
}

// comment waits (bounded) for a comment containing text.
func (s *sseStream) comment(t *testing.T, text string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case c := <-s.comments:
			if strings.Contains(c, text) {
				return c
			}
		case <-deadline:
			t.Fatalf("no comment with %q within 30s", text)
		}
	}
}

// ended waits (bounded) for the stream to end.
func (s *sseStream) ended(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end within 30s")
	}
}
