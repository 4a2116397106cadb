package paillier

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Progress is told how far a long vector operation has got: done of total
// steps are finished. It is called after every step, from several
// goroutines at once, so it must be safe for concurrent use; done values
// may arrive out of order.
type Progress func(done, total int)

// counter returns a function that counts one finished step and reports it.
func (p Progress) counter(total int) func() {
	if p == nil {
		return func() {}
	}
	var done atomic.Int64
	return func() { p(int(done.Add(1)), total) }
}

// parallelFor runs fn(i) for i in [0, n) on every core and returns the
// first error (by index order of detection); work stops early on error.
func parallelFor(n int, fn func(i int) error) error {
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	if workers <= 1 {
		for i := 0; i < n; i++ {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	var next atomic.Int64
	var once sync.Once
	var firstErr error
	var failed atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
