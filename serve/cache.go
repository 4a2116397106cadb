package serve

import (
	"context"
	"sync"
)

// cached keeps one expensive, derived value of the library (suggestions,
// people's mean descriptors, clusters) for the library's change counter
// (tagging.Library.ChangeCounter): a commit by this server, by its scans or
// by another program (veil faces name in a terminal) changes it, and the
// next request computes the value again. Only one computation runs at a
// time. The value is kept under the counter read before computing it, so
// a change committed while it was computed is never hidden; a computation
// that itself writes (clustering stores the clusters) is done once more at
// the next request, which then writes nothing.
type cached[T any] struct {
	mu      sync.Mutex
	version int64
	val     T
	ok      bool
}

// changeCounter is what cached needs of the library.
type changeCounter interface {
	ChangeCounter(ctx context.Context) (int64, error)
}

func (c *cached[T]) get(ctx context.Context, lib changeCounter, compute func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, err := lib.ChangeCounter(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	if c.ok && c.version == v {
		return c.val, nil
	}
	val, err := compute()
	if err != nil {
		return val, err
	}
	c.val, c.version, c.ok = val, v, true
	return val, nil
}
