package vec

import "sync"

// ParallelFor runs f over [0, n) split into contiguous ranges, one per
// worker (all of it on the calling goroutine when workers ≤ 1 or n is
// small). Use it where each index's result is independent of the split, so
// that results do not depend on the number of workers.
func ParallelFor(n, workers int, f func(lo, hi int)) {
	if workers <= 1 || n < 2*workers {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}
