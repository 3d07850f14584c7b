package views

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Holders (a Handle holds without the client's lock) and the eviction
// race on one word: a view is never evicted while held, and never held once
// evicted.
func TestViewHoldAndEvictionExcludeEachOther(t *testing.T) {
	for range 50 {
		v := newView("items", [16]byte{1}, 1, time.Millisecond)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan string, 4)
		for range 4 {
			wg.Go(func() {
				<-start
				for range 200 {
					if !v.tryHold() {
						if v.hold.Load()&holdEvicted == 0 {
							errs <- "a hold failed on a view not evicted"
						}
						return
					}
					if v.hold.Load()&holdEvicted != 0 {
						errs <- "the view was evicted while held"
						v.Release()
						return // one error per holder: errs never fills
					}
					v.Release()
				}
			})
		}
		close(start)
		for !v.retire() {
			runtime.Gosched()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
		if v.tryHold() {
			t.Fatal("an evicted view was held")
		}
		if n := v.hold.Load() & holdCount; n != 0 {
			t.Fatalf("%d holds left on the evicted view after every holder backed out", n)
		}
		if _, held := v.idleSince(); held {
			t.Fatal("the evicted view reads as held")
		}
	}
}

// One Release too many is a caller's bug, caught, whether or not the view
// was evicted since.
func TestViewReleaseWithoutHoldPanics(t *testing.T) {
	for _, evicted := range []bool{false, true} {
		v := newView("items", [16]byte{1}, 1, time.Millisecond)
		if evicted && !v.retire() {
			t.Fatal("an unheld view could not be evicted")
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("evicted %v: Release without a hold did not panic", evicted)
				}
			}()
			v.Release()
		}()
	}
}
