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
	"runtime"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/gobackend"
)

// EnvBackend names the environment variable the command reads into
// Options.Backend. Only "go" (the default) is supported in this build.
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

// Options configures an Engine. The zero value is Veil's default: the
// pure-Go backend, ops run in order (see goConfig), and one concurrent
// execution per core.
//
// SIMD: the pure-Go backend chooses its AVX2/AVX-512 matrix-product kernels
// once per process, in package initialisation, from the environment
// variables GOMLX_SIMD_AVX2 and GOMLX_SIMD_AVX512 (compute v0.1.3,
// internal/gobackend/dot/matmul). That choice cannot be made per backend,
// so Options has no SIMD field: pin it by setting GOMLX_SIMD_AVX512=off (or
// GOMLX_SIMD_AVX2=off) in the process's environment before it starts.
type Options struct {
	// Backend names the GoMLX backend: "" or "go" (the only one in this
	// build).
	Backend string
	// Parallelism is how many executions callers run at once; 0 means
	// Parallelism() (one per core). Negative values are refused.
	Parallelism int
}

// Engine is one configured compute backend and the parallelism its callers
// use. Create it once per process with New and hand it down through the
// option structs of the packages that run networks; it is safe for
// concurrent use.
type Engine struct {
	backend     compute.Backend
	parallelism int
}

// New validates o and creates an Engine.
func New(o Options) (*Engine, error) {
	if o.Parallelism < 0 {
		return nil, fmt.Errorf("engine: Parallelism %d is negative (0 means one per core)", o.Parallelism)
	}
	b, err := newBackend(o.Backend)
	if err != nil {
		return nil, err
	}
	p := o.Parallelism
	if p == 0 {
		p = Parallelism()
	}
	return &Engine{backend: b, parallelism: p}, nil
}

// Backend returns the engine's compute backend, for graph.NewExec.
func (e *Engine) Backend() compute.Backend { return e.backend }

// Parallelism is how many executions callers should run at once on this
// engine.
func (e *Engine) Parallelism() int { return e.parallelism }

// newBackend creates a backend named name ("" means the default) with the
// configuration Veil runs on.
func newBackend(name string) (compute.Backend, error) {
	switch name {
	case "", gobackend.BackendName:
		b, err := gobackend.New(goConfig)
		if err != nil {
			return nil, fmt.Errorf("engine: starting the pure-Go backend: %w", err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("engine: backend %q is not supported by this build (only %q; see %s)", name, gobackend.BackendName, EnvBackend)
	}
}

// Parallelism is the default parallelism: how many executions callers
// should run at once to keep every core busy on the pure-Go backend (one
// per GOMAXPROCS). It reads no state of its own; an Engine's Parallelism
// is the value its Options pinned.
func Parallelism() int {
	n := runtime.GOMAXPROCS(0)
	if n < 1 {
		n = 1
	}
	return n
}

// OrDefault returns e, or, when e is nil, a new Engine with the default
// Options. Library option structs accept a nil Engine this way; a process
// that runs several networks at once should create one Engine and pass it
// to all of them, so their executions share one worker pool.
func OrDefault(e *Engine) (*Engine, error) {
	if e != nil {
		return e, nil
	}
	return New(Options{})
}
