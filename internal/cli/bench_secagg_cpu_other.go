//go:build !unix

package cli

import "time"

// processCPU is unavailable on this platform and reports zero.
func processCPU() time.Duration { return 0 }
