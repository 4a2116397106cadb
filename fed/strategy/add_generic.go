//go:build !(goexperiment.simd && amd64)

package strategy

func addScaled(dst []float64, w float64, src []float32) { addScaledScalar(dst, w, src) }
