//go:build !unix

package tagging

import "time"

// processCPU is unknown on this system.
func processCPU() time.Duration { return 0 }
