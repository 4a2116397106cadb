//go:build !(goexperiment.simd && amd64)

package dplc

// dot returns Σ a[i]·b[i] (len(a) == len(b)).
func dot(a, b []float32) float32 { return dotScalar(a, b) }
