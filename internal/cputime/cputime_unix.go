//go:build unix

package cputime

import (
	"syscall"
	"time"
)

// Process returns the processor time this process has used so far, user
// and system, over all its threads (getrusage RUSAGE_SELF); 0 if the
// system cannot say.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
