// Package vec holds the project's small numeric kernels, each once: dot
// products, scaled additions, squared Euclidean distances (float64 and
// float32, with a 128-value row scan for face descriptors), the
// federation's widening kernels (float32 values added, scaled, to a
// float64 sum; a float32 vector's squared norm in float64), float32 and
// float64 matrix products, a symmetric eigensolver (cyclic Jacobi), a square
// singular value decomposition (one-sided Jacobi) and a parallel loop over
// index ranges.
//
// One CPU-feature switch chooses the kernels: with GOEXPERIMENT=simd on
// amd64, a CPU with AVX2 and FMA runs them in AVX2 registers with fused
// multiply-adds, else (or in a build without the experiment) the same
// functions run as plain Go with four independent sums. FMA rounds once per
// multiply-add, so results can differ in the last bits between the two
// paths; within one build on one machine they are deterministic, and none
// depends on the number of goroutines.
//
// The pretrained networks' convolution kernels (face/nets: an AVX2/FMA
// assembly matrix product tuned to their shapes) stay in face/nets.
package vec

// SIMD reports whether the kernels take the AVX2/FMA path on this machine
// and build (for benchmark reports and tests).
func SIMD() bool { return useSIMD }
