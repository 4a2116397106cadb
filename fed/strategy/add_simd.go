//go:build goexperiment.simd && amd64

package strategy

import "simd/archsimd"

// useAVX says whether addScaled's vector loop may run (VCVTPS2PD, VMULPD
// and VADDPD are AVX).
var useAVX = archsimd.X86.AVX()

// addScaled adds w·float64(src[i]) to dst[i] (len(dst) ≥ len(src)). The
// vector loop multiplies and adds as two rounded operations per lane (no
// fused multiply-add), so the sums are bit-for-bit the scalar loop's.
func addScaled(dst []float64, w float64, src []float32) {
	n := len(src)
	if !useAVX || n < 16 {
		addScaledScalar(dst, w, src)
		return
	}
	dst = dst[:n]
	wv := archsimd.BroadcastFloat64x4(w)
	i := 0
	for ; i+16 <= n; i += 16 {
		a0 := archsimd.LoadFloat32x4Slice(src[i:]).ConvertToFloat64().Mul(wv)
		a1 := archsimd.LoadFloat32x4Slice(src[i+4:]).ConvertToFloat64().Mul(wv)
		a2 := archsimd.LoadFloat32x4Slice(src[i+8:]).ConvertToFloat64().Mul(wv)
		a3 := archsimd.LoadFloat32x4Slice(src[i+12:]).ConvertToFloat64().Mul(wv)
		archsimd.LoadFloat64x4Slice(dst[i:]).Add(a0).StoreSlice(dst[i:])
		archsimd.LoadFloat64x4Slice(dst[i+4:]).Add(a1).StoreSlice(dst[i+4:])
		archsimd.LoadFloat64x4Slice(dst[i+8:]).Add(a2).StoreSlice(dst[i+8:])
		archsimd.LoadFloat64x4Slice(dst[i+12:]).Add(a3).StoreSlice(dst[i+12:])
	}
	addScaledScalar(dst[i:], w, src[i:])
}
