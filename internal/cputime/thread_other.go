//go:build !linux

package cputime

import "time"

// Thread returns 0: a thread's processor time is read on Linux only, and
// benchmarks then report wall time alone.
func Thread() time.Duration { return 0 }
