//go:build !(goexperiment.simd && amd64)

package nets

func kernGemmBlock(y []float32, ldy int, a []float32, lda, kc int, panel []float32, acc bool) {
	kernGemmBlockGeneric(y, ldy, a, lda, kc, panel, acc)
}
