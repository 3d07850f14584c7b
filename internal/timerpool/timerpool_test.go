package timerpool

import (
	"testing"
	"time"
)

// A timer whose time passed without its channel being read, put back and
// got again, must not deliver that old firing.
func TestReusedTimerHasNoStaleFiring(t *testing.T) {
	var p Pool
	first := p.Get(time.Millisecond)
	<-time.After(5 * time.Millisecond) // started later and fired: first's time has passed too
	p.Put(first)
	again := p.Get(time.Hour)
	if again != first {
		t.Log("the pool dropped the timer (a GC ran); nothing reused to check")
	}
	select {
	case <-again.C:
		t.Fatal("a reused timer delivered a firing from before it was put back")
	default:
	}
	p.Put(again)
}

// A timer got from the pool fires after the duration it was got with.
func TestGotTimerFires(t *testing.T) {
	var p Pool
	p.Put(p.Get(time.Hour)) // one in the pool, stopped before it fired
	tm := p.Get(time.Millisecond)
	select {
	case <-tm.C:
	case <-time.After(10 * time.Second):
		t.Fatal("a reused timer did not fire")
	}
	p.Put(tm)
}
