package serve

import (
	"sync"
	"time"
)

// cacheTTL bounds how long a cached computation is reused when nothing
// changed through this server: another program (veil faces name) may have
// changed the library meanwhile.
const cacheTTL = 30 * time.Second

// cached keeps one expensive, derived value of the library (suggestions,
// people's mean descriptors, clusters) for the server's current generation: every
// state-changing request and every photo a scan records starts a new
// generation. Only one computation runs at a time; a value computed while
// the generation moved on is not reused.
type cached[T any] struct {
	mu  sync.Mutex
	gen uint64
	at  time.Time
	val T
	ok  bool
}

func (c *cached[T]) get(gen uint64, compute func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && c.gen == gen && time.Since(c.at) < cacheTTL {
		return c.val, nil
	}
	v, err := compute()
	if err != nil {
		return v, err
	}
	c.val, c.gen, c.at, c.ok = v, gen, time.Now(), true
	return v, nil
}
