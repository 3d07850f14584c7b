package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// browserPage is the page the browser test serves: an EventSource on
// /events, and the page's own record of every event it received (and how
// often the stream opened), posted to /report after each change.
const browserPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>sse</title></head><body><pre id="log"></pre><script>
const record = { opens: 0, errors: 0, ids: [], data: [] };
function report() {
  document.getElementById("log").textContent = JSON.stringify(record);
  fetch("/report", { method: "POST", body: JSON.stringify(record) });
}
const events = new EventSource("/events");
events.onopen = () => { record.opens++; report(); };
events.onerror = () => { record.errors++; report(); };
events.onmessage = (e) => { record.ids.push(e.lastEventId); record.data.push(e.data); report(); };
</script></body></html>`

// pageRecord is what the page posts.
type pageRecord struct {
	Opens  int      `json:"opens"`
	Errors int      `json:"errors"`
	IDs    []string `json:"ids"`
	Data   []string `json:"data"`
}

// A real browser: headless Chromium opens a page whose EventSource follows
// a topic through the Envoy emulator and the processor. The processor is
// stopped (its drain ends the stream) and started again while records are
// written; the browser reconnects by itself with last-event-id and the
// page's own record of events is every record once, in order: no gap, no
// duplicate.
//
// The page is served by the test's web server, which also passes /events
// on to the front, as a site's server would: EventSource is same-origin
// without CORS. While the processor is down the server holds the
// browser's reconnect until the front answers again (Envoy with health
// checks would not send it to a stopped processor; the emulator keeps its
// turn), so that the browser's retry meets the new processor, not a 503.
func TestSSEBrowserResumesAcrossRestart(t *testing.T) {
	// Serial: a browser and a restart are heavy; sharing the CPU only slows both.
	chromium := findChromium(t)
	e := startSSE(t, func(o *stack.DevOptions) { o.Config.Limits.SSERetry = 100 * time.Millisecond })
	front, err := url.Parse(e.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(front)
	proxy.FlushInterval = -1 // each event as it comes
	var gate sync.RWMutex    // write-held while the processor is down
	reports := make(chan pageRecord, 1000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, browserPage)
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		gate.RLock()
		gate.RUnlock() //nolint:staticcheck // SA2001: waiting for the gate is the point
		proxy.ServeHTTP(w, r)
	})
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		var rec pageRecord
		if err := json.NewDecoder(r.Body).Decode(&rec); err == nil {
			reports <- rec
		}
		w.WriteHeader(http.StatusNoContent)
	})
	site := httptest.NewServer(mux)
	// Registered before Chromium's cleanup, so it runs after it: the
	// browser's stream holds a connection until the browser is gone.
	t.Cleanup(func() {
		site.CloseClientConnections()
		site.Close()
	})

	const before, during, after = 5, 5, 5
	write := func(from, n int) {
		for i := from; i < from+n; i++ {
			e.put("events", 0, fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("record %d", i)))
		}
	}
	write(0, before)
	runChromium(t, chromium, site.URL+"/")
	last := waitRecord(t, reports, func(r pageRecord) bool { return len(r.Data) >= before })
	if last.Opens != 1 {
		t.Fatalf("before the restart: %+v", last)
	}

	// Restart: hold reconnects, stop the processor (its drain ends the
	// stream), write records while it is down, start it again on its
	// address, wait until the front answers through it, release.
	gate.Lock()
	addr := e.dev.Processor.Addr()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.dev.Processor.Shutdown(sctx)
	cancel()
	waitRecord(t, reports, func(r pageRecord) bool { return r.Errors >= 1 })
	write(before, during)
	p, err := stack.StartProcessor(stack.ProcessorOptions{Config: e.dev.Config, Listen: addr,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		gate.Unlock()
		t.Fatalf("restarting the processor on %s: %v", addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	pollUntil(t, "the front answers through the new processor", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, _, err := e.sendReq(ctx, e.h1, http.MethodHead, "/events", "")
		return err == nil && resp.StatusCode == http.StatusOK
	})
	gate.Unlock()
	write(before+during, after)

	total := before + during + after
	last = waitRecord(t, reports, func(r pageRecord) bool { return len(r.Data) >= total })
	want := make([]string, total)
	for i := range want {
		want[i] = fmt.Sprintf("record %d", i)
	}
	if !slices.Equal(last.Data, want) {
		t.Fatalf("the page's record: %q\nwant every record once, in order: %q", last.Data, want)
	}
	if last.Opens < 2 {
		t.Fatalf("the stream opened %d times: the browser did not reconnect", last.Opens)
	}
	seen := map[string]bool{}
	for _, id := range last.IDs {
		if id == "" || seen[id] {
			t.Fatalf("event ids %q: an empty or repeated id", last.IDs)
		}
		seen[id] = true
	}
	t.Logf("the page received %d events over %d connections (%d errors on the way)", len(last.Data), last.Opens, last.Errors)
}

// findChromium is Debian's chromium; a machine without it fails the test
// with what to install (CI installs it in .ci/run).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the browser test needs Chromium: apt-get install -y chromium (Debian's package; .ci/run installs it)")
	return ""
}

// runChromium opens url in headless Chromium until the test ends.
func runChromium(t *testing.T, chromium, url string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--remote-debugging-port=0", url)
	// Chromium starts processes of its own that keep its output open: the
	// whole process group is killed, and Wait gives up on the output then.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out lockedBuilder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", chromium, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("chromium's output:\n%s", out.String())
		}
	})
}

// lockedBuilder is Chromium's output, written by two copying goroutines.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitRecord waits (bounded) for a report the condition holds for.
func waitRecord(t *testing.T, reports <-chan pageRecord, cond func(pageRecord) bool) pageRecord {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var last pageRecord
	for {
		select {
		case r := <-reports:
			last = r
			if cond(r) {
				return r
			}
		case <-deadline:
			t.Fatalf("the page did not get there within 60s; its last record: %+v", last)
		}
	}
}
