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

// dot4 returns the inner products of a with b0…b3 (all of len(a)).
func dot4(a, b0, b1, b2, b3 []float32) (float32, float32, float32, float32) {
	if !useSIMD || len(a) < 8 {
		return dotScalar(a, b0), dotScalar(a, b1), dotScalar(a, b2), dotScalar(a, b3)
	}
	n := len(a)
	b0, b1, b2, b3 = b0[:n], b1[:n], b2[:n], b3[:n]
	var s0, s1, s2, s3 archsimd.Float32x8
	i := 0
	for ; i+8 <= n; i += 8 {
		x := archsimd.LoadFloat32x8Slice(a[i:])
		s0 = x.MulAdd(archsimd.LoadFloat32x8Slice(b0[i:]), s0)
		s1 = x.MulAdd(archsimd.LoadFloat32x8Slice(b1[i:]), s1)
		s2 = x.MulAdd(archsimd.LoadFloat32x8Slice(b2[i:]), s2)
		s3 = x.MulAdd(archsimd.LoadFloat32x8Slice(b3[i:]), s3)
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

func hsum(s archsimd.Float32x8) float32 {
	var buf [8]float32
	s.Store(&buf)
	return (buf[0] + buf[1]) + (buf[2] + buf[3]) + (buf[4] + buf[5]) + (buf[6] + buf[7])
}
