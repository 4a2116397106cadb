package cputime

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD, which package syscall does not
// name.
const rusageThread = 1

// Thread returns the processor time, user and system, the calling OS
// thread has used so far, for benchmarks that lock their goroutine to a
// thread (runtime.LockOSThread): on a shared machine it measures the work
// where wall time measures the load. 0 if the system cannot say.
func Thread() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
