//go:build linux

package fedbench

import (
	"os"
	"syscall"
)

// childPeakRSS is an exited child's peak resident set in bytes, as the
// kernel accounted it (ru_maxrss, KiB on Linux; 0 if unknown).
func childPeakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}
