//go:build goexperiment.simd && amd64

package nets

import "simd/archsimd"

// kernGemm4x16 writes the 4×16 block y = a·panel (rows of a at stride k,
// rows of y at stride ldy) with the block's eight accumulators in
// registers.
func kernGemm4x16(y []float32, ldy int, a []float32, k int, panel []float32) {
	if !detHasAVX2 {
		kernGemm4x16Generic(y, ldy, a, k, panel)
		return
	}
	a0, a1, a2, a3 := a[:k], a[k:2*k], a[2*k:3*k], a[3*k:4*k]
	panel = panel[:k*kernGemmPanel]
	var c00, c01, c10, c11, c20, c21, c30, c31 archsimd.Float32x8
	for t := range k {
		p := panel[t*kernGemmPanel : t*kernGemmPanel+kernGemmPanel]
		lo := archsimd.LoadFloat32x8Slice(p)
		hi := archsimd.LoadFloat32x8Slice(p[8:])
		v := archsimd.BroadcastFloat32x8(a0[t])
		c00, c01 = v.MulAdd(lo, c00), v.MulAdd(hi, c01)
		v = archsimd.BroadcastFloat32x8(a1[t])
		c10, c11 = v.MulAdd(lo, c10), v.MulAdd(hi, c11)
		v = archsimd.BroadcastFloat32x8(a2[t])
		c20, c21 = v.MulAdd(lo, c20), v.MulAdd(hi, c21)
		v = archsimd.BroadcastFloat32x8(a3[t])
		c30, c31 = v.MulAdd(lo, c30), v.MulAdd(hi, c31)
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
