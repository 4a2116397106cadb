//go:build !(goexperiment.simd && amd64)

package nets

func kernGemm4x16(y []float32, ldy int, a []float32, k int, panel []float32) {
	kernGemm4x16Generic(y, ldy, a, k, panel)
}
