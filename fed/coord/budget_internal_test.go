package coord

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// waitFor waits (bounded) until b has n waiters.
func waitFor(t *testing.T, b *receiveBudget, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		got := len(b.waiters)
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", got, n)
		}
	}
}

// TestReceiveBudgetOrder: the budget grants in order of arrival (a small
// request does not overtake a large one waiting), a waiter that gives up
// (its stream ended, or its round's deadline passed) leaves and lets the
// next one in, and what is held never exceeds the limit.
func TestReceiveBudgetOrder(t *testing.T) {
	b := newReceiveBudget(10)
	ctx := context.Background()
	far := time.Now().Add(time.Hour)
	if err := b.acquire(ctx, 6, far); err != nil {
		t.Fatal(err)
	}
	bctx, cancelB := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() { bDone <- b.acquire(bctx, 6, far) }()
	waitFor(t, b, 1)
	cDone := make(chan error, 1)
	go func() { cDone <- b.acquire(ctx, 3, far) }()
	waitFor(t, b, 2) // 3 would fit, but waits behind 6
	cancelB()
	if err := <-bDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled waiter: %v", err)
	}
	if err := <-cDone; err != nil {
		t.Fatalf("the waiter behind it: %v", err)
	}
	if b.held != 9 {
		t.Fatalf("held %d, want 9", b.held)
	}
	// A request that cannot fit before its deadline is refused.
	if err := b.acquire(ctx, 5, time.Now().Add(20*time.Millisecond)); !errors.Is(err, errBudgetTimeout) {
		t.Fatalf("past the deadline: %v", err)
	}
	b.release(6)
	b.release(3)
	if b.held != 0 || len(b.waiters) != 0 || b.peak != 9 {
		t.Fatalf("held %d, waiters %d, peak %d; want 0, 0, 9", b.held, len(b.waiters), b.peak)
	}
}

// TestStreamLimitsAreValidated: a negative idle time or budget, and a
// budget below one update's payload, are refused by New.
func TestStreamLimitsAreValidated(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 2, 3}}}
	for _, tc := range []struct {
		idle   time.Duration
		budget int64
		want   string
	}{
		{-time.Second, 0, "must not be negative"},
		{0, -1, "must not be negative"},
		{0, 11, "below one update's payload (12 bytes)"},
	} {
		_, err := New(Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg"},
			Rounds: 1, Fraction: 1, MinAvailable: 1, MinUpdates: 1, RoundTimeout: time.Minute, MaxUpdateNorm: 10,
			Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1}, StreamIdle: tc.idle, ReceiveBudget: tc.budget})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("idle %s, budget %d: %v, want %q", tc.idle, tc.budget, err, tc.want)
		}
	}
}
