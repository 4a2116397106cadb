//go:build !linux

package quant

import "time"

// threadCPU is unavailable here: benchmarks report 0.
func threadCPU() time.Duration { return 0 }
