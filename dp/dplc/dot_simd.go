//go:build goexperiment.simd && amd64

package dplc

import "simd/archsimd"

var useSIMD = archsimd.X86.AVX2() && archsimd.X86.FMA()

// dot returns Σ a[i]·b[i] (len(a) == len(b)), with AVX2/FMA when available.
func dot(a, b []float32) float32 {
	if !useSIMD || len(a) < 32 {
		return dotScalar(a, b)
	}
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 archsimd.Float32x8
	i := 0
	for ; i+32 <= n; i += 32 {
		s0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), s0)
		s1 = archsimd.LoadFloat32x8Slice(a[i+8:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+8:]), s1)
		s2 = archsimd.LoadFloat32x8Slice(a[i+16:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+16:]), s2)
		s3 = archsimd.LoadFloat32x8Slice(a[i+24:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+24:]), s3)
	}
	for ; i+8 <= n; i += 8 {
		s0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), s0)
	}
	var buf [8]float32
	s0.Add(s1).Add(s2.Add(s3)).Store(&buf)
	s := (buf[0] + buf[1]) + (buf[2] + buf[3]) + (buf[4] + buf[5]) + (buf[6] + buf[7])
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}
