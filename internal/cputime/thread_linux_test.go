package cputime

import (
	"runtime"
	"testing"
	"time"
)

// TestThreadCountsThisThreadsWork: a thread that spins for a while has used
// processor time, and a thread that sleeps has used almost none.
func TestThreadCountsThisThreadsWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := Thread()
	x := 0.0
	for i := 0; Thread()-c0 < 20*time.Millisecond && i < 1e9; i++ {
		x += float64(i)
	}
	if Thread()-c0 < 20*time.Millisecond {
		t.Fatalf("a billion additions (%g) used %v of this thread's time", x, Thread()-c0)
	}
	c1 := Thread()
	time.Sleep(50 * time.Millisecond)
	if d := Thread() - c1; d > 40*time.Millisecond {
		t.Errorf("sleeping 50 ms used %v of this thread's processor time", d)
	}
}
