package stack

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"time"
)

// WatchFiles calls changed whenever the content of any of the files paths
// returns changes, checking every interval until ctx ends. A check that
// cannot read every file is skipped: an editor or a secret mount replacing
// a file leaves it missing for a moment, and a reload then would only fail. paths is asked on every check: a reload changes which
// files the configuration reads. Polling the content (not inotify) also
// catches the symlink swaps Kubernetes uses for mounted ConfigMaps and
// Secrets.
func WatchFiles(ctx context.Context, interval time.Duration, paths func() []string, changed func()) {
	sum := func() (s [sha256.Size]byte, ok bool) {
		h := sha256.New()
		for _, p := range paths() {
			b, err := os.ReadFile(p)
			if err != nil {
				return s, false
			}
			// The name too: a file added to the list is a change even if
			// its content equals another's.
			_, _ = io.WriteString(h, p+"\x00")
			_, _ = h.Write(b)
			_, _ = io.WriteString(h, "\x00")
		}
		h.Sum(s[:0])
		return s, true
	}
	last, _ := sum()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if now, ok := sum(); ok && now != last {
				last = now
				changed()
			}
		}
	}
}
