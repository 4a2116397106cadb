//go:build goexperiment.simd && amd64

package nets

import "simd/archsimd"

// kernGemm4x16 computes the 4×16 block a·panel for the four rows of a
// starting at a[0], a[lda], a[2·lda], a[3·lda] (kc values each) and the
// [kc][16] panel, and stores it into y (rows at stride ldy), or adds it to
// y when acc is set. The block's eight accumulators stay in registers.
//
// The products are a Mul and an Add rather than one MulAdd: Go compiles
// MulAdd to the form that overwrites the multiplicand, so every step copied
// the broadcast value and the accumulators were rotated through registers
// at the end of each iteration; the separate forms measured faster
// (BenchmarkKernGemm).
func kernGemm4x16(y []float32, ldy int, a []float32, lda, kc int, panel []float32, acc bool) {
	if !detHasAVX2 {
		kernGemm4x16Generic(y, ldy, a, lda, kc, panel, acc)
		return
	}
	a0, a1, a2, a3 := a[:kc], a[lda:lda+kc], a[2*lda:2*lda+kc], a[3*lda:3*lda+kc]
	panel = panel[:kc*kernGemmPanel]
	var c00, c01, c10, c11, c20, c21, c30, c31 archsimd.Float32x8
	if acc {
		c00, c01 = archsimd.LoadFloat32x8Slice(y), archsimd.LoadFloat32x8Slice(y[8:])
		c10, c11 = archsimd.LoadFloat32x8Slice(y[ldy:]), archsimd.LoadFloat32x8Slice(y[ldy+8:])
		c20, c21 = archsimd.LoadFloat32x8Slice(y[2*ldy:]), archsimd.LoadFloat32x8Slice(y[2*ldy+8:])
		c30, c31 = archsimd.LoadFloat32x8Slice(y[3*ldy:]), archsimd.LoadFloat32x8Slice(y[3*ldy+8:])
	}
	for t := range kc {
		p := panel[t*kernGemmPanel : t*kernGemmPanel+kernGemmPanel]
		lo := archsimd.LoadFloat32x8Slice(p)
		hi := archsimd.LoadFloat32x8Slice(p[8:])
		v := archsimd.BroadcastFloat32x8(a0[t])
		c00, c01 = c00.Add(v.Mul(lo)), c01.Add(v.Mul(hi))
		v = archsimd.BroadcastFloat32x8(a1[t])
		c10, c11 = c10.Add(v.Mul(lo)), c11.Add(v.Mul(hi))
		v = archsimd.BroadcastFloat32x8(a2[t])
		c20, c21 = c20.Add(v.Mul(lo)), c21.Add(v.Mul(hi))
		v = archsimd.BroadcastFloat32x8(a3[t])
		c30, c31 = c30.Add(v.Mul(lo)), c31.Add(v.Mul(hi))
	}
	c00.StoreSlice(y)
	c01.StoreSlice(y[8:])
	c10.StoreSlice(y[ldy:])
	c11.StoreSlice(y[ldy+8:])
	c20.StoreSlice(y[2*ldy:])
	c21.StoreSlice(y[2*ldy+8:])
	c30.StoreSlice(y[3*ldy:])
	c31.StoreSlice(y[3*ldy+8:])
}
