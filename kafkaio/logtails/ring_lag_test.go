package logtails

import "testing"

// A stream joins the ring at its oldest entry, which may be more than its
// budget behind the head: it is not cut for that, but for falling further
// behind than it ever was since it joined, and once it is within its budget,
// for falling more than its budget behind.
func TestCursorCatchUpAllowance(t *testing.T) {
	steps := []struct {
		seq, before uint64
		lagged      bool
		why         string
	}{
		{0, 1000, false, "joined 1,000 behind a 50 budget: its catch-up allowance"},
		{600, 1100, false, "catching up: 500 behind"},
		{700, 1150, false, "still catching up: 450 behind"},
		{700, 1160, true, "460 behind, more than the least lag since it joined"},
	}
	c := &cursor{budget: 50, catchUp: 1000}
	for _, s := range steps {
		if got := c.fellBehind(s.seq, s.before); got != s.lagged {
			t.Fatalf("%s: fellBehind(%d, %d) = %v", s.why, s.seq, s.before, got)
		}
	}

	within := &cursor{budget: 50, catchUp: 1000}
	for _, s := range []struct {
		seq, before uint64
		lagged      bool
		why         string
	}{
		{990, 1000, false, "caught up to 10 behind"},
		{990, 1040, false, "50 behind: its budget"},
		{990, 1041, true, "51 behind: over its budget once caught up"},
	} {
		if got := within.fellBehind(s.seq, s.before); got != s.lagged {
			t.Fatalf("%s: fellBehind(%d, %d) = %v", s.why, s.seq, s.before, got)
		}
	}
}
