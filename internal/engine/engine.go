// Package engine is the one place that chooses and configures the GoMLX
// backend Veil's networks run on.
//
// Veil runs on GoMLX's pure-Go backend ("go"), which needs no native library
// and works offline. The default GoMLX constructor is never used because it
// tries to download the XLA plug-in. Build with GOEXPERIMENT=simd for the
// AVX2 kernels.
//
// The pure-Go backend runs one execution on about one core; to use every
// core, callers run independent executions concurrently (see Parallelism).
package engine

import (
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/gobackend"
)

// EnvBackend names the environment variable that selects the backend.
// Only "go" (the default) is supported in this build.
const EnvBackend = "VEIL_BACKEND"

var (
	once    sync.Once
	backend compute.Backend
	initErr error
)

// Backend returns the process-wide compute backend, creating it on first use.
// A backend is a handle to the machine's compute devices, which is why it is
// shared rather than created per caller.
func Backend() (compute.Backend, error) {
	once.Do(func() {
		name := os.Getenv(EnvBackend)
		switch name {
		case "", gobackend.BackendName:
			backend, initErr = gobackend.New("")
			if initErr != nil {
				initErr = fmt.Errorf("engine: starting the pure-Go backend: %w", initErr)
			}
		default:
			initErr = fmt.Errorf("engine: %s=%q is not supported by this build (only %q)", EnvBackend, name, gobackend.BackendName)
		}
	})
	return backend, initErr
}

// Parallelism is how many executions callers should run at once to keep
// every core busy on the pure-Go backend.
func Parallelism() int {
	n := runtime.GOMAXPROCS(0)
	if n < 1 {
		n = 1
	}
	return n
}
