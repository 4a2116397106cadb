//go:build unix

package cputime

import (
	"testing"
	"time"
)

// TestProcessCountsWork spins until the processor time read has grown by
// 20 ms: it must grow with work and never go backwards. The spin is
// bounded by work done, not by wall time, so a loaded machine (which
// stretches wall time, not the processor time the work needs) cannot fail
// it. A step is a dependent multiply-add, about a nanosecond, so 20 ms of
// processor time is a few 10^7 steps even on the fastest processors; a
// reading stuck at 0 or at one value fails after maxSteps = 2·10^9 steps
// (a few seconds of processor time).
func TestProcessCountsWork(t *testing.T) {
	const (
		batch    = 100_000
		maxSteps = 2_000_000_000
	)
	start := Process()
	if start <= 0 {
		t.Fatalf("Process() = %v at the start of a running test", start)
	}
	prev, x := start, uint64(1)
	for steps := 0; prev-start < 20*time.Millisecond; steps += batch {
		if steps >= maxSteps {
			t.Fatalf("Process() grew by %v in %d steps of spinning (x=%d)", prev-start, steps, x)
		}
		for range batch {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now := Process()
		if now < prev {
			t.Fatalf("Process() went back from %v to %v", prev, now)
		}
		prev = now
	}
}
