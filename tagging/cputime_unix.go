//go:build unix

package tagging

import (
	"syscall"
	"time"
)

// processCPU is the processor time this process has used so far, user and
// system, over all its threads (0 if unknown).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
