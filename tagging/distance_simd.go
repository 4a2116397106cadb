//go:build goexperiment.simd && amd64

package tagging

import "simd/archsimd"

// useSIMD is true when the CPU has AVX2 and FMA. It is read-only after
// package initialisation.
var useSIMD = archsimd.X86.AVX2() && archsimd.X86.FMA()

// sqDist returns ‖a − b‖² for len(a) ≤ len(b), with AVX2 when the CPU has
// it (two 8-lane accumulators: a 128-d descriptor is 16 lanes of 8).
func sqDist(a, b []float32) float32 {
	n := len(a)
	if !useSIMD || n < 16 {
		return sqDistScalar(a, b)
	}
	b = b[:n]
	var s0, s1 archsimd.Float32x8
	i := 0
	for ; i+16 <= n; i += 16 {
		d0 := archsimd.LoadFloat32x8Slice(a[i:]).Sub(archsimd.LoadFloat32x8Slice(b[i:]))
		d1 := archsimd.LoadFloat32x8Slice(a[i+8:]).Sub(archsimd.LoadFloat32x8Slice(b[i+8:]))
		s0 = d0.MulAdd(d0, s0)
		s1 = d1.MulAdd(d1, s1)
	}
	var lanes [8]float32
	s0.Add(s1).Store(&lanes)
	s := ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
	for ; i < n; i++ {
		d := a[i] - b[i]
		s += d * d
	}
	return s
}
