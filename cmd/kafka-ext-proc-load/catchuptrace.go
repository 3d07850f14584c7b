package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/exp/trace"
)

// catchUpTrace is where a view's catch-up spent its time, read from an
// execution trace of the processor (-trace): over the life of its reader
// goroutine, how long the catch-up's goroutines ran, waited for a P
// (runnable), sat in cgo or system calls and were blocked; how many
// goroutines ran on average and how many of the Ps were held. These are
// the runtime's own accounts, so unlike a first load's seconds they do
// not move with the machine's pace between runs: the first load is not
// bound by the CPU alone (BENCHMARKS.md, "Where the first load waits").
type catchUpTrace struct {
	Seconds    float64 // the longest catch-up: its reader's life
	GoRunning  float64 // goroutines running, on average
	ProcsHeld  float64 // Ps held (running Go code or by a goroutine in a call), on average
	Goroutines map[string]goTimes
}

// goTimes are the seconds the goroutines of one kind spent in each state.
type goTimes struct {
	Running, Runnable, Syscall, Waiting float64
}

// The catch-up's goroutines, told by a function on their stacks: its
// reader polls the consumer, the apply is the goroutine that called
// (*Views).read and started the reader, and pebble's flushes (of every
// store) write the memtables out, their values through blob file writers
// that write on goroutines of their own.
const (
	readerFunc     = "kafkaio/views.(*Views).read.func1"
	applyFunc      = "kafkaio/views.(*Views).read"
	flushFunc      = "cockroachdb/pebble/v2.(*DB).flush"
	blobWriterFunc = "cockroachdb/pebble/v2/sstable/blob.(*FileWriter).drainWriteQueue"
)

var catchUpKinds = []string{"reader", "apply", "flush"}

// kindOf names the catch-up goroutine whose stack is s ("" for others).
func kindOf(s trace.Stack) string {
	kind := ""
	for f := range s.Frames() {
		switch {
		case strings.Contains(f.Func, readerFunc):
			return "reader"
		case strings.Contains(f.Func, applyFunc):
			kind = "apply"
		case (strings.Contains(f.Func, flushFunc) || strings.Contains(f.Func, blobWriterFunc)) && kind == "":
			kind = "flush"
		}
	}
	return kind
}

// readCatchUpTrace reads the trace in file twice: first for the kind of
// each goroutine and the longest-lived reader, whose life is the window;
// then for every goroutine's and P's states within it.
func readCatchUpTrace(file string) (catchUpTrace, error) {
	kinds := map[trace.GoID]string{}
	born := map[trace.GoID]trace.Time{}
	creator := map[trace.GoID]trace.GoID{}
	var from, to trace.Time
	var reader trace.GoID
	err := eachTransition(file, func(ev *trace.Event, st trace.StateTransition) {
		if st.Resource.Kind != trace.ResourceGoroutine {
			return
		}
		id := st.Resource.Goroutine()
		if kinds[id] == "" {
			kinds[id] = kindOf(st.Stack)
			if kinds[id] == "" && ev.Goroutine() == id {
				kinds[id] = kindOf(ev.Stack())
			}
		}
		if _, ok := born[id]; !ok {
			born[id] = ev.Time()
		}
		was, now := st.Goroutine()
		if was == trace.GoNotExist {
			creator[id] = ev.Goroutine()
		}
		if now == trace.GoNotExist && kinds[id] == "reader" && ev.Time()-born[id] > to-from {
			from, to, reader = born[id], ev.Time(), id
		}
	})
	if err != nil {
		return catchUpTrace{}, err
	}
	if to == from {
		return catchUpTrace{}, fmt.Errorf("the trace %s has no catch-up's reader (%s) that ended", file, readerFunc)
	}
	// The window's catch-up alone: its reader and the goroutine that
	// started it; another view's catch-up at the same time counts with the
	// processor's other goroutines.
	for id, kind := range kinds {
		if (kind == "reader" && id != reader) || (kind == "apply" && id != creator[reader]) {
			kinds[id] = ""
		}
	}
	if kinds[creator[reader]] != "apply" {
		return catchUpTrace{}, fmt.Errorf("the trace %s: the catch-up's reader was not started by %s", file, applyFunc)
	}

	type since struct {
		state string
		at    trace.Time
	}
	gos, procs := map[trace.GoID]since{}, map[trace.ProcID]since{}
	times := map[string]map[string]float64{} // kind, state: seconds
	var running, held float64
	// add counts the part of [at, end) within the window.
	add := func(kind, state string, at, end trace.Time) {
		at, end = max(at, from), min(end, to)
		if end <= at {
			return
		}
		d := float64(end-at) / 1e9
		switch {
		case kind == "proc" && state == trace.ProcRunning.String():
			held += d
		case kind != "proc" && state == trace.GoRunning.String():
			running += d
		}
		if times[kind] == nil {
			times[kind] = map[string]float64{}
		}
		times[kind][state] += d
	}
	err = eachTransition(file, func(ev *trace.Event, st trace.StateTransition) {
		t := ev.Time()
		switch st.Resource.Kind {
		case trace.ResourceGoroutine:
			id := st.Resource.Goroutine()
			was, now := st.Goroutine()
			if s, ok := gos[id]; ok {
				add(kinds[id], s.state, s.at, t)
			} else {
				add(kinds[id], was.String(), from, t) // in its state since before the window
			}
			gos[id] = since{now.String(), t}
		case trace.ResourceProc:
			id := st.Resource.Proc()
			was, now := st.Proc()
			if s, ok := procs[id]; ok {
				add("proc", s.state, s.at, t)
			} else {
				add("proc", was.String(), from, t)
			}
			procs[id] = since{now.String(), t}
		}
	})
	if err != nil {
		return catchUpTrace{}, err
	}
	for id, s := range gos {
		add(kinds[id], s.state, s.at, to)
	}
	for _, s := range procs {
		add("proc", s.state, s.at, to)
	}
	window := float64(to-from) / 1e9
	ct := catchUpTrace{Seconds: window, GoRunning: running / window, ProcsHeld: held / window, Goroutines: map[string]goTimes{}}
	for _, kind := range catchUpKinds {
		m := times[kind]
		ct.Goroutines[kind] = goTimes{
			Running: m[trace.GoRunning.String()], Runnable: m[trace.GoRunnable.String()],
			Syscall: m[trace.GoSyscall.String()], Waiting: m[trace.GoWaiting.String()],
		}
	}
	return ct, nil
}

// figures adds ct to res as disk_trace_* figures.
func (ct catchUpTrace) figures(res *Result) {
	res.figure("disk_trace_catchup_seconds", ct.Seconds)
	res.figure("disk_trace_goroutines_running", ct.GoRunning)
	res.figure("disk_trace_procs_held", ct.ProcsHeld)
	for _, kind := range catchUpKinds {
		g := ct.Goroutines[kind]
		res.figure("disk_trace_"+kind+"_running_s", g.Running)
		res.figure("disk_trace_"+kind+"_runnable_s", g.Runnable)
		res.figure("disk_trace_"+kind+"_syscall_s", g.Syscall)
		res.figure("disk_trace_"+kind+"_waiting_s", g.Waiting)
	}
}

// eachTransition calls f with each state transition of the trace in file.
func eachTransition(file string, f func(*trace.Event, trace.StateTransition)) error {
	fh, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fh.Close()
	r, err := trace.NewReader(fh)
	if err != nil {
		return fmt.Errorf("reading the trace %s: %w", file, err)
	}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the trace %s: %w", file, err)
		}
		if ev.Kind() == trace.EventStateTransition {
			f(&ev, ev.StateTransition())
		}
	}
}
