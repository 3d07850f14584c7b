package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
)

// childEnv, when set in the environment, makes this binary the server side
// of a -split run; its value is a childConfig in JSON. An environment
// variable rather than a flag, so a test binary re-executed the same way
// works too.
const childEnv = "KAFKA_EXT_PROC_LOAD_SERVERS"

// childConfig is what the child takes from the parent's flags.
type childConfig struct {
	LogLevel string   `json:"log_level"`
	Profiles profiles `json:"profiles"`
	Limits   string   `json:"limits,omitempty"` // -limits
	// NoopOnly starts no broker and no processor: the process serves the
	// no-op server alone, so its memory samples hold nothing else.
	NoopOnly bool `json:"noop_only,omitempty"`
	// Broker is the address of an embedded broker the parent runs: the
	// child starts none, so its memory samples hold the processor and the
	// responder alone (the broker keeps every record in memory).
	Broker string `json:"broker,omitempty"`
	// ViewStore, with Broker, makes the child view-scale's processor with
	// its views on disk in this directory and nothing else: its resident
	// set is then the processor's alone.
	ViewStore string `json:"view_store,omitempty"`
}

// childRequest is one command to the child, one JSON object per line on its
// standard input.
type childRequest struct {
	Op      string            `json:"op"`
	Topic   string            `json:"topic,omitempty"`
	Records map[string][]byte `json:"records,omitempty"`
	Answer  [][]byte          `json:"answer,omitempty"` // marshalled ProcessingResponses
	Hold    bool              `json:"hold,omitempty"`
	Name    string            `json:"name,omitempty"` // of a gauge
	GC      bool              `json:"gc,omitempty"`
	Profile string            `json:"profile,omitempty"` // a heap profile to write after a memory sample
}

// childResponse answers one childRequest, one JSON object per line on the
// child's file descriptor 3. The first line, unasked, carries Addr: the
// processor's address, and Broker: the embedded broker's.
type childResponse struct {
	Err    string  `json:"err,omitempty"`
	Addr   string  `json:"addr,omitempty"`
	Broker string  `json:"broker,omitempty"`
	Count  int64   `json:"count,omitempty"`
	Usage  *usage  `json:"usage,omitempty"`
	Memory *memory `json:"memory,omitempty"`
	// ReplyIndex answers opReplies.
	ReplyIndex *replyIndexSample `json:"reply_index,omitempty"`
}

const (
	opPut     = "put"
	opNoop    = "noop"
	opStop    = "noop-stop"
	opRelease = "release"
	opHeld    = "held"
	opGauge   = "gauge"
	opRespond = "responder"
	opRoutes  = "more-routes"
	opUnresp  = "responder-stop"
	opUsage   = "usage"
	opMemory  = "memory"
	opCPUProf = "cpu-profile"
	opReplies = "reply-index"
)

// child is the server side in a child process: this binary re-executed
// with childEnv set, commanded over its standard input, answering on fd 3. Calls
// are serialised; a call abandoned on its context kills the child (the
// pipe cannot be read with a deadline), which ends the run.
type child struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	outFile *os.File
	out     *bufio.Scanner
	addr    string
	broker  string
	mu      sync.Mutex
	dead    error
}

var _ servers = (*child)(nil)

func startChild(ctx context.Context, cfg childConfig) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable to run the servers apart: %w", err)
	}
	cj, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(cj))
	cmd.Stdout = os.Stderr // nothing is expected there; keep it off the protocol
	cmd.Stderr = os.Stderr // the child's logs
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Answers come on a pipe of their own (the child's fd 3), so whatever a
	// library prints on standard output cannot corrupt them.
	out, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close() // the child holds its copy
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("starting the server process: %w", err)
	}
	c := &child{cmd: cmd, in: in, outFile: out, out: bufio.NewScanner(out)}
	c.out.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var hello childResponse
	if err := c.read(ctx, &hello); err != nil {
		c.close()
		return nil, fmt.Errorf("starting the server process: %w", err)
	}
	if hello.Err != "" {
		c.close()
		return nil, fmt.Errorf("the server process: %s", hello.Err)
	}
	c.addr, c.broker = hello.Addr, hello.Broker
	return c, nil
}

// read reads one response line, killing the child if ctx ends first.
func (c *child) read(ctx context.Context, r *childResponse) error {
	done := make(chan error, 1)
	go func() {
		if !c.out.Scan() {
			done <- errors.Join(errors.New("the server process ended"), c.out.Err())
			return
		}
		done <- json.Unmarshal(c.out.Bytes(), r)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = c.cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

func (c *child) call(ctx context.Context, req childRequest) (childResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var r childResponse
	if c.dead != nil {
		return r, c.dead
	}
	b, err := json.Marshal(req)
	if err != nil {
		return r, err
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.dead = fmt.Errorf("the server process: %w", err)
		return r, c.dead
	}
	if err := c.read(ctx, &r); err != nil {
		c.dead = fmt.Errorf("the server process (%s): %w", req.Op, err)
		return r, c.dead
	}
	if r.Err != "" {
		return r, fmt.Errorf("the server process (%s): %s", req.Op, r.Err)
	}
	return r, nil
}

func (c *child) processorAddr() string { return c.addr }

func (c *child) brokerAddr() string { return c.broker }

func (c *child) moreRoutes(ctx context.Context) error {
	_, err := c.call(ctx, childRequest{Op: opRoutes})
	return err
}

func (c *child) startResponder(ctx context.Context) error {
	_, err := c.call(ctx, childRequest{Op: opRespond})
	return err
}

func (c *child) stopResponder(ctx context.Context) error {
	_, err := c.call(ctx, childRequest{Op: opUnresp})
	return err
}

func (c *child) put(ctx context.Context, topic string, records map[string][]byte) error {
	_, err := c.call(ctx, childRequest{Op: opPut, Topic: topic, Records: records})
	return err
}

func (c *child) startNoop(ctx context.Context, answer []*extprocv3.ProcessingResponse, hold bool) (string, error) {
	req := childRequest{Op: opNoop, Hold: hold}
	for _, a := range answer {
		b, err := proto.Marshal(a)
		if err != nil {
			return "", err
		}
		req.Answer = append(req.Answer, b)
	}
	r, err := c.call(ctx, req)
	return r.Addr, err
}

func (c *child) stopNoop(ctx context.Context) error {
	_, err := c.call(ctx, childRequest{Op: opStop})
	return err
}

func (c *child) releaseNoop(ctx context.Context) error {
	_, err := c.call(ctx, childRequest{Op: opRelease})
	return err
}

func (c *child) heldNoop(ctx context.Context) (int64, error) {
	r, err := c.call(ctx, childRequest{Op: opHeld})
	return r.Count, err
}

func (c *child) gauge(ctx context.Context, name string) (int64, error) {
	r, err := c.call(ctx, childRequest{Op: opGauge, Name: name})
	return r.Count, err
}

func (c *child) replyIndex(ctx context.Context) (replyIndexSample, error) {
	r, err := c.call(ctx, childRequest{Op: opReplies})
	if err != nil || r.ReplyIndex == nil {
		return replyIndexSample{}, errors.Join(err, errors.New("no reply index sample in the answer"))
	}
	return *r.ReplyIndex, nil
}

func (c *child) usage(ctx context.Context, gc bool) (usage, bool, error) {
	r, err := c.call(ctx, childRequest{Op: opUsage, GC: gc})
	if err != nil || r.Usage == nil {
		return usage{}, false, errors.Join(err, errors.New("no usage in the answer"))
	}
	return *r.Usage, true, nil
}

func (c *child) cpuProfile(ctx context.Context, file string) error {
	_, err := c.call(ctx, childRequest{Op: opCPUProf, Profile: file})
	return err
}

func (c *child) memory(ctx context.Context, profile string) (memory, bool, error) {
	r, err := c.call(ctx, childRequest{Op: opMemory, Profile: profile})
	if err != nil || r.Memory == nil {
		return memory{}, false, errors.Join(err, errors.New("no memory sample in the answer"))
	}
	return *r.Memory, true, nil
}

// childExit bounds the child's shutdown (the processor's drain, the
// broker) after its input ends; it is killed after that.
const childExit = 30 * time.Second

// close ends the child: end of input is its signal to stop.
func (c *child) close() {
	_ = c.in.Close()
	exited := make(chan struct{})
	go func() {
		_ = c.cmd.Wait()
		close(exited)
	}()
	t := time.NewTimer(childExit)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-exited
	}
	_ = c.outFile.Close()
}

// serveChild is the child's side: it starts the servers, announces the
// processor's address and answers commands until its input ends.
func serveChild(ctx context.Context, in io.Reader, out io.Writer, logger *slog.Logger, cfg childConfig) error {
	enc := json.NewEncoder(out)
	l := &local{log: logger}
	if !cfg.NoopOnly {
		var err error
		if cfg.ViewStore != "" {
			l, err = startViewDiskLocal(logger, cfg.ViewStore, cfg.Broker)
		} else {
			l, err = startLocal(logger, cfg.Limits, cfg.Broker)
		}
		if err != nil {
			_ = enc.Encode(childResponse{Err: err.Error()})
			return err
		}
	}
	defer l.close()
	var hello childResponse
	if l.proc != nil {
		hello = childResponse{Addr: l.processorAddr(), Broker: l.brokerAddr()}
	}
	if err := enc.Encode(hello); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 256<<20) // a put of the merged records is one line
	for sc.Scan() {
		var req childRequest
		var r childResponse
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("reading a command: %w", err)
		}
		if err := l.serve(ctx, req, &r); err != nil {
			r.Err = err.Error()
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

func (l *local) serve(ctx context.Context, req childRequest, r *childResponse) error {
	switch req.Op {
	case opNoop, opStop, opRelease, opHeld, opUsage, opMemory, opCPUProf:
	default:
		if l.proc == nil {
			return fmt.Errorf("command %q: this server process runs the no-op server alone", req.Op)
		}
	}
	var err error
	switch req.Op {
	case opPut:
		err = l.put(ctx, req.Topic, req.Records)
	case opNoop:
		var answer []*extprocv3.ProcessingResponse
		for _, b := range req.Answer {
			m := &extprocv3.ProcessingResponse{}
			if err := proto.Unmarshal(b, m); err != nil {
				return err
			}
			answer = append(answer, m)
		}
		r.Addr, err = l.startNoop(ctx, answer, req.Hold)
	case opStop:
		err = l.stopNoop(ctx)
	case opRelease:
		err = l.releaseNoop(ctx)
	case opHeld:
		r.Count, err = l.heldNoop(ctx)
	case opGauge:
		r.Count, err = l.gauge(ctx, req.Name)
	case opReplies:
		var s replyIndexSample
		s, err = l.replyIndex(ctx)
		r.ReplyIndex = &s
	case opRespond:
		err = l.startResponder(ctx)
	case opRoutes:
		err = l.moreRoutes(ctx)
	case opUnresp:
		err = l.stopResponder(ctx)
	case opUsage:
		u := sampleUsage(req.GC)
		r.Usage = &u
	case opCPUProf:
		err = l.cpuProfile(ctx, req.Profile)
	case opMemory:
		m := sampleMemory()
		r.Memory = &m
		if req.Profile != "" {
			err = writeProfile("heap", req.Profile)
		}
	default:
		err = fmt.Errorf("unknown command %q", req.Op)
	}
	return err
}

// childMain runs this process as the server side of a -split run, as
// config (a childConfig in JSON) says: commands on stdin, answers on out.
// Profiles the parent asked for are of this process: the server side.
func childMain(ctx context.Context, config string, stdin io.Reader, out, stderr io.Writer) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		fmt.Fprintf(stderr, "kafka-ext-proc-load (servers): reading %s: %v\n", childEnv, err)
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		lv = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv})).With("process", "servers")
	stopProfiles, err := startProfiles(cfg.Profiles)
	if err != nil {
		logger.Error("starting the profiles", "err", err)
		return 1
	}
	err = serveChild(ctx, stdin, out, logger, cfg)
	if perr := stopProfiles(); err == nil {
		err = perr
	}
	if err != nil {
		logger.Error("server process failed", "err", err)
		return 1
	}
	return 0
}
