//go:build goexperiment.simd && amd64

package metric

import "simd/archsimd"

// The kernels use AVX2 and FMA when the CPU has them. FMA rounds once per
// multiply-add, so results can differ in the last bits from a build without
// GOEXPERIMENT=simd; within one build they are deterministic.
var useSIMD = archsimd.X86.AVX2() && archsimd.X86.FMA()

func hsum(s archsimd.Float64x4) float64 {
	var b [4]float64
	s.Store(&b)
	return (b[0] + b[1]) + (b[2] + b[3])
}

// dot returns Σ a[i]·b[i] (len(b) ≥ len(a)).
func dot(a, b []float64) float64 {
	n := len(a)
	if !useSIMD || n < 16 {
		return dotScalar(a, b)
	}
	b = b[:n]
	var s0, s1, s2, s3 archsimd.Float64x4
	i := 0
	for ; i+16 <= n; i += 16 {
		s0 = archsimd.LoadFloat64x4Slice(a[i:]).MulAdd(archsimd.LoadFloat64x4Slice(b[i:]), s0)
		s1 = archsimd.LoadFloat64x4Slice(a[i+4:]).MulAdd(archsimd.LoadFloat64x4Slice(b[i+4:]), s1)
		s2 = archsimd.LoadFloat64x4Slice(a[i+8:]).MulAdd(archsimd.LoadFloat64x4Slice(b[i+8:]), s2)
		s3 = archsimd.LoadFloat64x4Slice(a[i+12:]).MulAdd(archsimd.LoadFloat64x4Slice(b[i+12:]), s3)
	}
	for ; i+4 <= n; i += 4 {
		s0 = archsimd.LoadFloat64x4Slice(a[i:]).MulAdd(archsimd.LoadFloat64x4Slice(b[i:]), s0)
	}
	s := hsum(s0.Add(s1).Add(s2.Add(s3)))
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// dot4 returns the inner products of a with b0…b3 (each at least len(a)).
func dot4(a, b0, b1, b2, b3 []float64) (float64, float64, float64, float64) {
	n := len(a)
	if !useSIMD || n < 4 {
		return dotScalar(a, b0), dotScalar(a, b1), dotScalar(a, b2), dotScalar(a, b3)
	}
	b0, b1, b2, b3 = b0[:n], b1[:n], b2[:n], b3[:n]
	var s0, s1, s2, s3 archsimd.Float64x4
	i := 0
	for ; i+4 <= n; i += 4 {
		x := archsimd.LoadFloat64x4Slice(a[i:])
		s0 = x.MulAdd(archsimd.LoadFloat64x4Slice(b0[i:]), s0)
		s1 = x.MulAdd(archsimd.LoadFloat64x4Slice(b1[i:]), s1)
		s2 = x.MulAdd(archsimd.LoadFloat64x4Slice(b2[i:]), s2)
		s3 = x.MulAdd(archsimd.LoadFloat64x4Slice(b3[i:]), s3)
	}
	r0, r1, r2, r3 := hsum(s0), hsum(s1), hsum(s2), hsum(s3)
	for ; i < n; i++ {
		r0 += a[i] * b0[i]
		r1 += a[i] * b1[i]
		r2 += a[i] * b2[i]
		r3 += a[i] * b3[i]
	}
	return r0, r1, r2, r3
}

// sqDist returns ‖a − b‖² (len(b) ≥ len(a)).
func sqDist(a, b []float64) float64 {
	n := len(a)
	if !useSIMD || n < 8 {
		return sqDistScalar(a, b)
	}
	b = b[:n]
	var s0, s1 archsimd.Float64x4
	i := 0
	for ; i+8 <= n; i += 8 {
		d0 := archsimd.LoadFloat64x4Slice(a[i:]).Sub(archsimd.LoadFloat64x4Slice(b[i:]))
		d1 := archsimd.LoadFloat64x4Slice(a[i+4:]).Sub(archsimd.LoadFloat64x4Slice(b[i+4:]))
		s0 = d0.MulAdd(d0, s0)
		s1 = d1.MulAdd(d1, s1)
	}
	for ; i+4 <= n; i += 4 {
		d0 := archsimd.LoadFloat64x4Slice(a[i:]).Sub(archsimd.LoadFloat64x4Slice(b[i:]))
		s0 = d0.MulAdd(d0, s0)
	}
	s := hsum(s0.Add(s1))
	for ; i < n; i++ {
		d := a[i] - b[i]
		s += d * d
	}
	return s
}

// axpy adds alpha·x to y (len(y) ≥ len(x)).
func axpy(alpha float64, x, y []float64) {
	n := len(x)
	if !useSIMD || n < 8 {
		axpyScalar(alpha, x, y)
		return
	}
	y = y[:n]
	al := archsimd.BroadcastFloat64x4(alpha)
	i := 0
	for ; i+8 <= n; i += 8 {
		archsimd.LoadFloat64x4Slice(x[i:]).MulAdd(al, archsimd.LoadFloat64x4Slice(y[i:])).StoreSlice(y[i:])
		archsimd.LoadFloat64x4Slice(x[i+4:]).MulAdd(al, archsimd.LoadFloat64x4Slice(y[i+4:])).StoreSlice(y[i+4:])
	}
	for ; i+4 <= n; i += 4 {
		archsimd.LoadFloat64x4Slice(x[i:]).MulAdd(al, archsimd.LoadFloat64x4Slice(y[i:])).StoreSlice(y[i:])
	}
	for ; i < n; i++ {
		y[i] += alpha * x[i]
	}
}
