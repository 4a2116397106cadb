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
// Each execution runs its operations in order (see goConfig): the backend's
// default of running independent operations in parallel can deadlock.
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

// goConfig is the pure-Go backend's configuration: "ops_sequential" makes
// every execution run its graph's operations one after another on the
// calling goroutine; the matrix-product and convolution kernels still split
// their own work over the backend's worker pool.
//
// Why: compute v0.1.3 otherwise runs a lone execution's ready operations
// concurrently, each on one of the worker pool's 2·GOMAXPROCS slots
// (internal/gobackend/executable.go:421). A matrix product or convolution
// running in a slot then waits for more free slots to split its own work
// (workerspool.(*Pool).Saturate, workerspool.go:166-167, and
// (*Pool).WaitToStart from ops/convgeneral_exec_base.go:247) while keeping
// its own slot. When 2·GOMAXPROCS such operations are ready at once they take
// every slot, each waits for a slot held by another, and nothing ever frees
// one: the execution hangs forever (issue 13; TestExecutionsDoNotDeadlock
// reproduces it). With ops_sequential no slot holder ever waits on the pool,
// so that cycle cannot form. The backend already picks this mode by itself
// for an execution that starts while another is running, which is how Veil
// keeps both cores busy (see Parallelism); a lone execution loses only its
// parallelism between independent operations, which on a LightFace training
// step measured within this machine's noise.
const goConfig = "ops_sequential"

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
		backend, initErr = newBackend(os.Getenv(EnvBackend))
	})
	return backend, initErr
}

// newBackend creates a backend named name ("" means the default) with the
// configuration Veil runs on. Backend calls it once; tests call it to get a
// backend of their own that a failure cannot leave broken for other tests.
func newBackend(name string) (compute.Backend, error) {
	switch name {
	case "", gobackend.BackendName:
		b, err := gobackend.New(goConfig)
		if err != nil {
			return nil, fmt.Errorf("engine: starting the pure-Go backend: %w", err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("engine: %s=%q is not supported by this build (only %q)", EnvBackend, name, gobackend.BackendName)
	}
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
