package httpkafka

import (
	"testing"
	"time"
)

func TestDeadlinesShareAMillisecond(t *testing.T) {
	var d deadlines
	at := time.Now().Add(50 * time.Millisecond).Truncate(time.Millisecond)
	a, releaseA := d.wait(at)
	b, releaseB := d.wait(at.Add(-time.Microsecond)) // the same millisecond, rounded up
	c, releaseC := d.wait(at.Add(time.Millisecond))
	if a != b || a == c || d.len() != 2 {
		t.Fatalf("channels %p %p %p, %d deadlines: want the first two shared, 2 deadlines", a, b, c, d.len())
	}
	select {
	case <-a:
		if now := time.Now(); now.Before(at) {
			t.Errorf("closed at %v, before its deadline %v", now, at)
		}
	case <-time.After(time.Minute):
		t.Fatal("not closed after its deadline")
	}
	<-c
	releaseA()
	releaseB()
	releaseC()
	if d.len() != 0 {
		t.Errorf("%d deadlines left after they fired", d.len())
	}
}

func TestDeadlinesReleasedStopTheirTimer(t *testing.T) {
	var d deadlines
	at := time.Now().Add(time.Hour)
	_, r1 := d.wait(at)
	ch, r2 := d.wait(at)
	r1()
	if d.len() != 1 {
		t.Fatalf("%d deadlines with one waiter left, want 1", d.len())
	}
	r2()
	if d.len() != 0 {
		t.Fatalf("%d deadlines after the last waiter left, want 0", d.len())
	}
	select {
	case <-ch:
		t.Fatal("closed an hour early")
	default:
	}
	// A later waiter on the same millisecond gets a live deadline again.
	ch2, r3 := d.wait(at)
	defer r3()
	if ch2 == ch || d.len() != 1 {
		t.Errorf("a new waiter after release: same channel %v, %d deadlines", ch2 == ch, d.len())
	}
}

func TestDeadlinesInThePastFireAtOnce(t *testing.T) {
	var d deadlines
	ch, release := d.wait(time.Now().Add(-time.Second))
	defer release()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatal("a past deadline did not fire")
	}
}
