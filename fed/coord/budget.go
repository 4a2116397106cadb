package coord

import (
	"context"
	"errors"
	"sync"
	"time"
)

// DefaultReceiveBudget is the default of Options.ReceiveBudget: 256 MiB,
// the buffers of over a hundred updates of the embedding head (2.2 MB each)
// at once.
const DefaultReceiveBudget = 256 << 20

// DefaultStreamIdle is the default of Options.StreamIdle.
const DefaultStreamIdle = 30 * time.Second

// receiveBudget bounds the bytes of the buffers held for updates being
// received or waiting to be folded, over every stream. A stream takes its
// update's bytes before it allocates them and gives them back once its
// buffer can no longer be read; one that does not fit waits, in order of
// arrival, for earlier ones to give back enough.
type receiveBudget struct {
	mu      sync.Mutex
	limit   int64
	held    int64
	peak    int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are granted
}

// errBudgetTimeout is acquire's error when its deadline passes first.
var errBudgetTimeout = errors.New("no room in the receive budget before the deadline")

func newReceiveBudget(limit int64) *receiveBudget { return &receiveBudget{limit: limit} }

// acquire takes n bytes (n ≤ the limit), waiting for room behind the
// streams that asked before, until ctx ends or deadline passes.
func (b *receiveBudget) acquire(ctx context.Context, n int64, deadline time.Time) error {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.held+n <= b.limit {
		b.grant(n)
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errBudgetTimeout
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: given back
		b.held -= n
		b.wake()
	default:
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
		b.wake() // the waiter behind may fit now
	}
	return err
}

// grant records n bytes as held (b.mu held).
func (b *receiveBudget) grant(n int64) {
	b.held += n
	b.peak = max(b.peak, b.held)
}

// wake grants the waiters at the front that fit (b.mu held).
func (b *receiveBudget) wake() {
	for len(b.waiters) > 0 && b.held+b.waiters[0].n <= b.limit {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.grant(w.n)
		close(w.ready)
	}
}

// release gives back n bytes.
func (b *receiveBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	b.wake()
}

// ReceiveStats is what the receive budget holds.
type ReceiveStats struct {
	// Budget is the bound (Options.ReceiveBudget).
	Budget int64
	// Held is the bytes held now by update buffers, Peak the most held
	// at any time since the coordinator started.
	Held, Peak int64
	// Waiting is the number of streams waiting for room.
	Waiting int
}

// ReceiveStats returns the receive budget's counters.
func (c *Coordinator) ReceiveStats() ReceiveStats {
	b := c.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	return ReceiveStats{Budget: b.limit, Held: b.held, Peak: b.peak, Waiting: len(b.waiters)}
}
