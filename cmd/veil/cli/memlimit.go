package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/veil-privacy/veil/fed/ops"
)

// memoryLimitHelp is --memory-limit's help, the coordinator's and veil
// bench fed's.
const memoryLimitHelp = "the coordinator process's soft memory limit (runtime/debug.SetMemoryLimit), e.g. 160MiB: the Go collector runs more often as the process nears it instead of letting the heap grow to twice its live data (GOGC=100); off: the Go runtime's default, or the GOMEMLIMIT environment variable. Units B, KiB, MiB, GiB; at least 32MiB"

// applyMemoryLimit parses --memory-limit and, unless it is off, sets this
// process's soft memory limit.
func applyMemoryLimit(s string) error {
	n, err := ops.ParseMemoryLimit(s)
	if err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	if n > 0 {
		debug.SetMemoryLimit(n)
	}
	return nil
}
