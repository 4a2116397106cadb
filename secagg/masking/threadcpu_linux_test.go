package masking

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time (user + system) of the calling OS thread,
// for benchmarks that lock their goroutine to a thread: on a shared
// machine it measures the work where wall time measures the load.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
