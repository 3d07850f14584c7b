package logbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	if b.Lines() != nil {
		t.Fatalf("empty buffer: %q", b.Lines())
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(&b, "line %d\n", i)
		}()
	}
	wg.Wait()
	if n := len(b.Lines()); n != 10 {
		t.Fatalf("%d lines, want 10:\n%s", n, b.String())
	}
}
