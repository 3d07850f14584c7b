// Package logbuf is a log sink for tests: a buffer that several goroutines
// may write at once (a slog handler and the code under test).
package logbuf

import (
	"strings"
	"sync"
)

// Buffer collects what is written to it. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines is everything written so far, one element per line (none when
// nothing was written).
func (s *Buffer) Lines() []string {
	out := strings.TrimSpace(s.String())
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}
