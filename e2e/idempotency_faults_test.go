package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const keyFaultsConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: /faults }]
        exit: kafka0
        with: { capability: produce, topic: faults, acks: leader_only }
limits: { kafka-timeout: 3s }
`

// faultLoad sends keyed oneway writes and retries each with the same key
// until it is acknowledged, as a client that follows docs/reliability.md
// does: 503, 504 and a broken connection are retried, anything else is a
// failure of the test.
type faultLoad struct {
	t       *testing.T
	client  *http.Client
	mu      sync.Mutex
	started chan struct{} // closed at the first acknowledgement
	acked   map[string]bool
	answers map[string]int // status (or "error") → count
	tries   atomic.Int64
	// after504 is how long the client waits before retrying a 504
	// (100ms if 0).
	after504 time.Duration
}

func newFaultLoad(t *testing.T) *faultLoad {
	return &faultLoad{t: t, client: &http.Client{Timeout: 20 * time.Second}, started: make(chan struct{}), acked: map[string]bool{}, answers: map[string]int{}}
}

// write sends key's record through bases in turn (the next one on each
// retry) until one answers 204, within a bound.
func (l *faultLoad) write(key string, bases func(try int) string) {
	deadline := time.Now().Add(40 * time.Second)
	for try := 0; time.Now().Before(deadline); try++ {
		l.tries.Add(1)
		req, _ := http.NewRequest("POST", bases(try)+"/faults", strings.NewReader("v-"+key))
		req.Header.Set("idempotency-key", key)
		resp, err := l.client.Do(req)
		answer := "error"
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			answer = fmt.Sprint(resp.StatusCode)
		}
		l.mu.Lock()
		l.answers[answer]++
		if answer == "204" {
			if len(l.acked) == 0 {
				close(l.started)
			}
			l.acked[key] = true
		}
		l.mu.Unlock()
		switch answer {
		case "204":
			return
		case "504":
			time.Sleep(max(l.after504, 100*time.Millisecond))
		case "503", "error":
			time.Sleep(100 * time.Millisecond)
		default:
			l.t.Errorf("key %s: %s, want 204 or a status that says to retry", key, answer)
			return
		}
	}
	l.t.Errorf("key %s: not acknowledged within the bound", key)
}

// run writes keys named prefix-i, conc at a time, and calls during (the
// fault) once start is closed; it writes at least n keys and goes on until
// during has returned, so writes are in flight throughout the fault. It
// returns the number of keys once every one is done.
func (l *faultLoad) run(prefix string, n, conc int, bases func(try int) string, start <-chan struct{}, during func()) int {
	keys := make(chan string)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				l.write(k, bases)
			}
		}()
	}
	var fault sync.WaitGroup
	var faultDone atomic.Bool
	fault.Add(1)
	go func() {
		defer fault.Done()
		defer faultDone.Store(true)
		select {
		case <-start:
			during()
		case <-time.After(30 * time.Second):
			l.t.Error("the fault never started")
		}
	}()
	i := 0
	for ; i < n || !faultDone.Load(); i++ {
		keys <- fmt.Sprintf("%s-%d", prefix, i)
	}
	close(keys)
	wg.Wait()
	fault.Wait()
	return i
}

// count reads the topic and returns, for the keys of prefix, the keys
// acknowledged with no record and the records beyond one per key.
func (l *faultLoad) count(e *env, prefix string, n int) (lost, dups int) {
	perKey := map[string]int{}
	for _, m := range e.readTopic("faults") {
		cid, _ := recHeader(m, "gateway:correlation-id")
		for i := range n {
			k := fmt.Sprintf("%s-%d", prefix, i)
			if strings.HasPrefix(cid, k+"-") {
				perKey[k]++
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range n {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if l.acked[k] && perKey[k] == 0 {
			lost++
		}
		if perKey[k] > 1 {
			dups += perKey[k] - 1
		}
	}
	return lost, dups
}

// report logs the figures of a fault and checks them: every key
// acknowledged, none lost, at most maxDups records beyond one per key.
func (l *faultLoad) report(fault string, n int, lost, dups, maxDups int, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, only204 := l.answers["204"]; only204 && len(l.answers) == 1 {
		l.t.Errorf("FAULT %s: every request was answered 204: the fault caught no write in flight", fault)
	}
	var as []string
	for a, c := range l.answers {
		as = append(as, fmt.Sprintf("%s×%d", a, c))
	}
	sort.Strings(as)
	l.t.Logf("FAULT %s: keys=%d acknowledged=%d requests=%d answers=[%s] acknowledged-lost=%d duplicate-records=%d in %v",
		fault, n, len(l.acked), l.tries.Load(), strings.Join(as, " "), lost, dups, took.Round(100*time.Millisecond))
	if lost != 0 || dups > maxDups || len(l.acked) != n {
		l.t.Errorf("FAULT %s: %d of %d keys acknowledged, %d acknowledged lost, %d duplicate records; want all, 0, at most %d", fault, len(l.acked), n, lost, dups, maxDups)
	}
}

// Keyed writes through faults, each retried with its key until
// acknowledged: the broker stopped, the broker frozen past the Kafka
// timeout (the records are written after their 504), and a processor
// killed with SIGKILL in a child process, its requests retried through
// another replica. Every key is acknowledged, none is lost, and none is in
// the log twice.
func TestIdempotencyKeyFaults(t *testing.T) {
	t.Parallel()
	if os.Getenv("KAFKA_EXT_PROC_FAULT_CHILD") != "" {
		t.Skip("the child process runs TestIdempotencyKeyFaultsChild")
	}
	var ln *switchedListener
	e := startEnv(t, keyFaultsConfig, switched(&ln))
	const n, conc = 60, 8
	self := func(int) string { return e.base }

	t.Run("broker stop", func(t *testing.T) {
		l := newFaultLoad(t)
		start := time.Now()
		n := l.run("stop", n, conc, self, l.started, func() {
			ln.set(t, false)
			time.Sleep(4 * time.Second) // past the Kafka timeout
			ln.set(t, true)
		})
		lost, dups := l.count(e, "stop", n)
		l.report("broker stop", n, lost, dups, 0, time.Since(start))
	})

	freeze := func(t *testing.T, prefix string, after504 time.Duration) (l *faultLoad, keys, lost, dups int, took time.Duration) {
		l = newFaultLoad(t)
		l.after504 = after504
		fr := freezeProduce(e)
		start := time.Now()
		n := l.run(prefix, n, conc, self, l.started, func() {
			// Longer than limits.kafka-timeout from the first held write:
			// the held writes are answered 504, then written when the
			// broker thaws.
			fr.freeze()
			<-fr.holding(1)
			time.Sleep(3500 * time.Millisecond)
			fr.thaw()
		})
		lost, dups = l.count(e, prefix, n)
		return l, n, lost, dups, time.Since(start)
	}
	t.Run("broker freeze", func(t *testing.T) {
		// Retries of a 504 sent once the broker answers again.
		l, n, lost, dups, took := freeze(t, "freeze", 4*time.Second)
		l.report("broker freeze", n, lost, dups, 0, took)
	})
	t.Run("broker freeze, retried while frozen", func(t *testing.T) {
		// The known limit (docs/reliability.md): a retry of a 504 sent
		// while the broker still holds the original write finds nothing in
		// the log and writes again. Each duplicate must come from a retried
		// 504, and no acknowledged record may be lost.
		l, n, lost, dups, took := freeze(t, "frozen", 0)
		l.mu.Lock()
		retried := l.answers["504"]
		l.mu.Unlock()
		l.report("broker freeze, retried while frozen", n, lost, dups, retried, took)
	})

	t.Run("processor kill -9", func(t *testing.T) {
		child := startFaultChild(t, e)
		l := newFaultLoad(t)
		// The broker holds the child's writes, so that records are on their
		// way into the log when the child dies: their retries through the
		// other replica must find them there.
		fr := freezeProduce(e)
		fr.freeze()
		bases := func(try int) string {
			if try == 0 {
				return child.base // first to the replica that is killed
			}
			return e.base // retries to the other replica
		}
		start := time.Now()
		n := l.run("kill", n, conc, bases, fr.holding(1), func() {
			if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Error(err)
			}
			_ = child.cmd.Wait()
			fr.thaw()
		})
		lost, dups := l.count(e, "kill", n)
		l.report("processor kill -9", n, lost, dups, 0, time.Since(start))
	})
}

// frozen holds the broker's produce requests while frozen; thawed, it
// lets them through (each is written then, whether or not its producer
// still waits for the answer).
type frozen struct {
	held    atomic.Int32
	isOn    atomic.Bool
	release chan struct{}
}

func freezeProduce(e *env) *frozen {
	f := &frozen{release: make(chan struct{})}
	cluster := e.dev.Broker.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if f.isOn.Load() {
			f.held.Add(1)
			cluster.SleepControl(func() { <-f.release })
		}
		return nil, nil, false
	})
	return f
}

func (f *frozen) freeze() { f.isOn.Store(true) }

func (f *frozen) thaw() {
	if f.isOn.Swap(false) {
		close(f.release)
	}
}

// holding is closed once the broker holds n produce requests.
func (f *frozen) holding(n int32) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for deadline := time.Now().Add(20 * time.Second); f.held.Load() < n && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ch
}

type faultChild struct {
	cmd  *exec.Cmd
	base string
}

// startFaultChild runs a processor and its emulator in a child process (this
// test binary, TestIdempotencyKeyFaultsChild) on the env's broker.
func startFaultChild(t *testing.T, e *env) *faultChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestIdempotencyKeyFaultsChild$", "-test.timeout", "5m")
	cmd.Env = append(os.Environ(), "KAFKA_EXT_PROC_FAULT_CHILD="+e.dev.Broker.Addr())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	front := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "FRONT "); ok {
				front <- a
			}
		}
	}()
	select {
	case a := <-front:
		return &faultChild{cmd: cmd, base: "http://" + a}
	case <-time.After(60 * time.Second):
		t.Fatal("the child processor did not start")
		return nil
	}
}

// TestIdempotencyKeyFaultsChild is the child process of the kill -9 fault:
// a processor and an emulator on the broker named by the environment,
// until killed.
func TestIdempotencyKeyFaultsChild(t *testing.T) {
	t.Parallel()
	broker := os.Getenv("KAFKA_EXT_PROC_FAULT_CHILD")
	if broker == "" {
		t.Skip("run by TestIdempotencyKeyFaults")
	}
	cfg, err := config.Parse("faults.yaml", []byte(keyFaultsConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	p, err := stack.StartProcessor(stack.ProcessorOptions{Config: stack.PointAt(cfg, broker), Listen: "127.0.0.1:0", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	f, err := stack.StartFront(envoy.DefaultYAML(), "127.0.0.1:0", p.Addr(), logger)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("FRONT %s\n", f.Addr())
	<-context.Background().Done() // until SIGKILL
}
