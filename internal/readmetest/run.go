package readmetest

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The addresses READMEs use: `kafka-ext-proc dev`'s defaults. Commands are
// rewritten to the addresses the test's stack listens on.
const (
	FrontAddr = "127.0.0.1:8080"
	KafkaAddr = "127.0.0.1:9092"
)

// Env is what running a README's steps needs from the caller.
type Env struct {
	// Start runs the README's start command, `go run ./cmd/kafka-ext-proc
	// ARGS...`, as a user would (on loopback ports of its choice), stops it
	// when the test ends, and returns the addresses of the front and of
	// Kafka.
	Start func(t *testing.T, args []string) (front, kafka string)
	// Root is the directory the README's commands run in (the repository
	// root): relative paths (grpcurl -proto) are resolved against it.
	Root string
	// StepTimeout bounds each step (default 30s).
	StepTimeout time.Duration
	// Program runs a step `go run ./examples/NAME ARGS...`, a program of
	// the example's own that keeps running (a service answering through
	// Kafka): it starts dir with args (addresses already rewritten to the
	// test's), stops it when the test ends, and returns what the program
	// printed once ready, which the step's output is compared with. ctx
	// bounds the start only. Nil: such a step fails.
	Program func(ctx context.Context, t *testing.T, dir string, args []string) (string, error)
}

// Run runs the steps in order, each compared with the output the README
// shows for it; the first command must be the start command. A step that
// runs in the background (" &") is awaited after the step that follows it.
// Placeholders (<name>) in an output take the value they match; the
// commands that follow use it.
func Run(t *testing.T, steps []Step, env Env) {
	t.Helper()
	if env.StepTimeout <= 0 {
		env.StepTimeout = 30 * time.Second
	}
	r := &runner{t: t, env: env, vars: Vars{}}
	defer r.close()
	var pending []*job
	for i, s := range steps {
		if i == 0 {
			words, err := ShellWords(s.Command)
			if err != nil || len(words) < 3 || words[0] != "go" || words[1] != "run" || words[2] != "./cmd/kafka-ext-proc" {
				t.Fatalf("line %d: the first step must be `go run ./cmd/kafka-ext-proc ...`, not %q", s.Line, s.Command)
			}
			r.front, r.kafka = env.Start(t, words[3:])
			continue
		}
		j := r.start(s)
		if s.Background {
			pending = append(pending, j)
			continue
		}
		r.check(j)
		for _, p := range pending {
			r.check(p)
		}
		pending = nil
	}
	for _, p := range pending {
		r.check(p)
	}
}

type runner struct {
	t            *testing.T
	env          Env
	front, kafka string
	vars         Vars
	mu           sync.Mutex // guards the clients below
	client       *http.Client
	conn         *grpc.ClientConn
	producer     *kafka.Producer
}

// job is a step under way.
type job struct {
	step Step
	cmd  string // with placeholders expanded and addresses rewritten
	done chan struct{}
	out  output
	err  error
}

// output is what a command printed, and how to compare it.
type output struct {
	text    string                                      // as the tool prints it
	compare func(want string, vars Vars) (bool, string) // nil: NormalizeSpace equality with placeholders
}

func (r *runner) start(s Step) *job {
	j := &job{step: s, done: make(chan struct{})}
	cmd, err := Expand(s.Command, r.vars)
	if err != nil {
		r.t.Fatalf("line %d: %s: %v", s.Line, s.Command, err)
	}
	for from, to := range map[string]string{FrontAddr: r.front, "localhost:8080": r.front, KafkaAddr: r.kafka, "localhost:9092": r.kafka} {
		cmd = strings.ReplaceAll(cmd, from, to)
	}
	j.cmd = cmd
	// A copy of the values: a background step must not race with the
	// steps that bind new ones.
	vars := maps.Clone(r.vars)
	go func() {
		defer close(j.done)
		ctx, cancel := context.WithTimeout(context.Background(), r.env.StepTimeout)
		defer cancel()
		j.out, j.err = r.exec(ctx, cmd, s, vars)
	}()
	return j
}

func (r *runner) check(j *job) {
	r.t.Helper()
	select {
	case <-j.done:
	case <-time.After(r.env.StepTimeout + 5*time.Second):
		r.t.Fatalf("line %d: %s: no answer within %v", j.step.Line, j.step.Command, r.env.StepTimeout)
	}
	if j.err != nil {
		r.t.Fatalf("line %d: %s: %v", j.step.Line, j.cmd, j.err)
	}
	r.t.Logf("line %d: %s", j.step.Line, j.step.Command)
	if !j.step.HasOutput {
		return
	}
	vars := maps.Clone(r.vars)
	ok, detail := false, ""
	if j.out.compare != nil {
		ok, detail = j.out.compare(j.step.Output, vars)
	} else {
		ok = Match(NormalizeSpace(j.step.Output), NormalizeSpace(j.out.text), vars)
	}
	if !ok {
		if detail != "" {
			detail = "\n" + detail
		}
		r.t.Fatalf("line %d: %s\nthe README shows:\n%s\nthe command printed:\n%s%s", j.step.Line, j.step.Command, j.step.Output, j.out.text, detail)
	}
	r.vars = vars
}

// exec runs one command line: a curl, grpcurl or kcat command, an
// example's own program (Env.Program), or one of the pipelines `echo '...' | kcat -P ...` and `printf '...' | base64`.
func (r *runner) exec(ctx context.Context, cmd string, s Step, vars Vars) (output, error) {
	words, err := ShellWords(cmd)
	if err != nil {
		return output{}, err
	}
	stages, err := pipeline(words)
	if err != nil {
		return output{}, err
	}
	if len(stages) == 1 {
		return r.execOne(ctx, cmd, stages[0], s, vars)
	}
	switch {
	case len(stages) == 2 && stages[0][0] == "echo" && stages[1][0] == "kcat":
		if len(stages[0]) != 2 {
			return output{}, fmt.Errorf("echo takes one quoted argument here")
		}
		k, err := parseKcat(stages[1])
		if err != nil {
			return output{}, err
		}
		if !k.produce {
			return output{}, fmt.Errorf("echo ... | kcat needs -P")
		}
		return r.produce(ctx, k, stages[0][1]+"\n")
	case len(stages) == 2 && stages[0][0] == "printf" && len(stages[1]) == 1 && stages[1][0] == "base64":
		if len(stages[0]) != 2 {
			return output{}, fmt.Errorf("printf takes one quoted format here")
		}
		b, err := Printf(stages[0][1])
		if err != nil {
			return output{}, err
		}
		return output{text: base64Lines(b)}, nil
	}
	return output{}, fmt.Errorf("the test does not know how to run this command")
}

// pipeline splits a command's words into the stages of its pipeline.
func pipeline(words []string) ([][]string, error) {
	var stages [][]string
	cur := []string{}
	for _, w := range words {
		if w == "|" {
			stages = append(stages, cur)
			cur = []string{}
			continue
		}
		if w == "&" {
			return nil, fmt.Errorf("& inside a line")
		}
		cur = append(cur, w)
	}
	stages = append(stages, cur)
	for _, st := range stages {
		if len(st) == 0 {
			return nil, fmt.Errorf("an empty pipeline stage")
		}
	}
	return stages, nil
}

// execOne runs a command line without a pipe: curl, grpcurl or kcat -C.
func (r *runner) execOne(ctx context.Context, cmd string, words []string, s Step, vars Vars) (output, error) {
	switch words[0] {
	case "curl":
		c, err := parseCurlWords(cmd, words)
		if err != nil {
			return output{}, err
		}
		return r.curl(ctx, c)
	case "grpcurl":
		g, err := parseGrpcurl(words)
		if err != nil {
			return output{}, err
		}
		return r.grpcurl(ctx, g, s, vars)
	case "go":
		if len(words) < 3 || words[1] != "run" || !strings.HasPrefix(words[2], "./examples/") || r.env.Program == nil {
			break
		}
		text, err := r.env.Program(ctx, r.t, words[2], words[3:])
		return output{text: text}, err
	case "kcat":
		k, err := parseKcat(words)
		if err != nil {
			return output{}, err
		}
		if k.produce {
			return output{}, fmt.Errorf("kcat -P reads its records from a pipe (echo '...' | kcat -P)")
		}
		return r.consume(ctx, k)
	}
	return output{}, fmt.Errorf("the test does not know how to run this command")
}

func (r *runner) httpClient() *http.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		r.client = &http.Client{
			// curl neither asks for compressed bodies nor follows redirects.
			Transport:     &http.Transport{DisableCompression: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return r.client
}

func (r *runner) grpcConn() (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		c, err := grpc.NewClient(r.front, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		r.conn = c
	}
	return r.conn, nil
}

func (r *runner) kafkaProducer() (*kafka.Producer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.producer == nil {
		p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": r.kafka, "log_level": 3, "linger.ms": 0})
		if err != nil {
			return nil, err
		}
		r.producer = p
	}
	return r.producer, nil
}

func (r *runner) close() {
	if r.client != nil {
		r.client.CloseIdleConnections()
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
	if r.producer != nil {
		r.producer.Close()
	}
}
