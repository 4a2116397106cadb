//go:build !(goexperiment.simd && amd64)

package dplc

// dot returns Σ a[i]·b[i] (len(a) == len(b)).
func dot(a, b []float32) float32 { return dotScalar(a, b) }

// dot4 returns the inner products of a with b0…b3 (all of len(a)).
func dot4(a, b0, b1, b2, b3 []float32) (float32, float32, float32, float32) {
	return dotScalar(a, b0), dotScalar(a, b1), dotScalar(a, b2), dotScalar(a, b3)
}
