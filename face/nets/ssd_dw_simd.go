//go:build goexperiment.simd && amd64

package nets

import "simd/archsimd"

var hasAVX2 = archsimd.X86.AVX2()

// dwAccum computes o += a*w element-wise (AVX2 when available).
func dwAccum(o, a, w []float32) {
	if !hasAVX2 {
		dwAccumGeneric(o, a, w)
		return
	}
	n := len(o)
	a, w = a[:n], w[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		x := archsimd.LoadFloat32x8Slice(a[i:])
		y := archsimd.LoadFloat32x8Slice(w[i:])
		z := archsimd.LoadFloat32x8Slice(o[i:])
		x.Mul(y).Add(z).StoreSlice(o[i:])
	}
	dwAccumGeneric(o[i:], a[i:], w[i:])
}

// addSlice computes o += b element-wise.
func addSlice(o, b []float32) {
	if !hasAVX2 {
		addSliceGeneric(o, b)
		return
	}
	n := len(o)
	b = b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		x := archsimd.LoadFloat32x8Slice(o[i:])
		x.Add(archsimd.LoadFloat32x8Slice(b[i:])).StoreSlice(o[i:])
	}
	addSliceGeneric(o[i:], b[i:])
}

// relu6Slice clamps every value to [0, 6].
func relu6Slice(o []float32) {
	if !hasAVX2 {
		relu6SliceGeneric(o)
		return
	}
	zero, six := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(6)
	i := 0
	for ; i+8 <= len(o); i += 8 {
		archsimd.LoadFloat32x8Slice(o[i:]).Max(zero).Min(six).StoreSlice(o[i:])
	}
	relu6SliceGeneric(o[i:])
}
