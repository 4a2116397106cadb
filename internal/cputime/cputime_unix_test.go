//go:build unix

package cputime

import (
	"testing"
	"time"
)

// TestProcessCountsWork spins until the processor time read has grown by
// 20 ms: it must grow with work (a reading stuck at 0 or at one value
// fails after 10 s of wall time) and never go backwards.
func TestProcessCountsWork(t *testing.T) {
	start := Process()
	if start <= 0 {
		t.Fatalf("Process() = %v at the start of a running test", start)
	}
	deadline := time.Now().Add(10 * time.Second)
	prev, x := start, uint64(1)
	for prev-start < 20*time.Millisecond {
		for i := 0; i < 1e5; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now := Process()
		if now < prev {
			t.Fatalf("Process() went back from %v to %v", prev, now)
		}
		prev = now
		if time.Now().After(deadline) {
			t.Fatalf("Process() grew by %v in 10 s of spinning (x=%d)", prev-start, x)
		}
	}
}
