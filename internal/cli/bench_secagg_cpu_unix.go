//go:build unix

package cli

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) the process has used, so
// benchmarks can report figures that a busy machine distorts less than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
