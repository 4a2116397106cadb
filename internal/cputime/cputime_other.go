//go:build !unix

package cputime

import "time"

// Process returns 0: the processor time used is not read on this system.
func Process() time.Duration { return 0 }
