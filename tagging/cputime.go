package tagging

import (
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
)

// processCPU is the processor time this process has used so far, user and
// system, over all its threads (0 if unknown).
func processCPU() time.Duration { return cputime.Process() }
