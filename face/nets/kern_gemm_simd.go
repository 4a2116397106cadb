//go:build goexperiment.simd && amd64

package nets

// kernGemmBlock computes the kernGemmMR×16 block a·panel for the rows of a
// starting at a[r·lda] (kc values each) and the [kc][16] panel, and stores
// it into y (rows at stride ldy), or adds it to y when acc is set.
//
// With AVX2 and FMA it runs kernGemm6x16AVX2 (kern_gemm_amd64.s): the
// block's twelve accumulators stay in registers, each step loads one panel
// row and broadcasts one value of each row of a straight from memory into
// two fused multiply-adds. Written with archsimd, a 4×16 version of the
// same loop measured 1.5–2× slower (BenchmarkKernGemm): Go compiles MulAdd
// to the form that overwrites the multiplicand, so every step copied
// registers, and it reloaded loop values from the stack.
func kernGemmBlock(y []float32, ldy int, a []float32, lda, kc int, panel []float32, acc bool) {
	if !detHasAVX2 || kc <= 0 {
		kernGemmBlockGeneric(y, ldy, a, lda, kc, panel, acc)
		return
	}
	// The assembly reads and writes exactly these elements.
	_ = y[(kernGemmMR-1)*ldy+kernGemmPanel-1]
	_ = a[(kernGemmMR-1)*lda+kc-1]
	_ = panel[kc*kernGemmPanel-1]
	if ldy < kernGemmPanel || lda < kc {
		panic("nets: kernGemmBlock: overlapping rows")
	}
	kernGemm6x16AVX2(&y[0], ldy, &a[0], lda, kc, &panel[0], acc)
}

// kernGemm6x16AVX2 is in kern_gemm_amd64.s.
//
//go:noescape
func kernGemm6x16AVX2(y *float32, ldy int, a *float32, lda int, kc int, panel *float32, acc bool)
