package stack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// WatchFile calls changed whenever the content of path changes, checking
// every interval until ctx ends. Polling the content (not inotify) also
// catches the symlink swaps Kubernetes uses for mounted ConfigMaps.
func WatchFile(ctx context.Context, path string, interval time.Duration, changed func()) {
	sum := func() []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		h := sha256.Sum256(b)
		return h[:]
	}
	last := sum()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if now := sum(); now != nil && !bytes.Equal(now, last) {
				last = now
				changed()
			}
		}
	}
}
