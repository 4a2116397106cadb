package cli

import (
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
)

// processCPU returns the CPU time (user + system) the process has used, so
// benchmarks can report figures that a busy machine distorts less than wall time.
func processCPU() time.Duration { return cputime.Process() }
