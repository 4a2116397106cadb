//go:build !(goexperiment.simd && amd64)

package nets

func kernGemm4x16(y []float32, ldy int, a []float32, lda, kc int, panel []float32, acc bool) {
	kernGemm4x16Generic(y, ldy, a, lda, kc, panel, acc)
}
