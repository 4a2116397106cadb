//go:build goexperiment.simd && amd64

package nets

// kernGemm4x16 computes the 4×16 block a·panel for the four rows of a
// starting at a[0], a[lda], a[2·lda], a[3·lda] (kc values each) and the
// [kc][16] panel, and stores it into y (rows at stride ldy), or adds it to
// y when acc is set.
//
// With AVX2 and FMA it runs kernGemm4x16AVX2 (kern_gemm_amd64.s): the
// block's eight accumulators stay in registers, each step loads one panel
// row and broadcasts one value of each row of a straight from memory into
// four fused multiply-adds per register pair. Written with archsimd, the
// same loop measured 1.5–2× slower (BenchmarkKernGemm): Go compiles
// MulAdd to the form that overwrites the multiplicand, so every step
// copied registers, and it reloaded loop values from the stack.
func kernGemm4x16(y []float32, ldy int, a []float32, lda, kc int, panel []float32, acc bool) {
	if !detHasAVX2 || kc <= 0 {
		kernGemm4x16Generic(y, ldy, a, lda, kc, panel, acc)
		return
	}
	// The assembly reads and writes exactly these elements.
	_ = y[3*ldy+kernGemmPanel-1]
	_ = a[3*lda+kc-1]
	_ = panel[kc*kernGemmPanel-1]
	if ldy < kernGemmPanel || lda < kc {
		panic("nets: kernGemm4x16: overlapping rows")
	}
	kernGemm4x16AVX2(&y[0], ldy, &a[0], lda, kc, &panel[0], acc)
}

// kernGemm4x16AVX2 is in kern_gemm_amd64.s.
//
//go:noescape
func kernGemm4x16AVX2(y *float32, ldy int, a *float32, lda int, kc int, panel *float32, acc bool)
