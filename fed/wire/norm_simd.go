//go:build goexperiment.simd && amd64

package wire

import "simd/archsimd"

// useAVX says whether sumSquares's vector loop may run (VCVTPS2PD, VMULPD
// and VADDPD are AVX).
var useAVX = archsimd.X86.AVX()

// sumSquares returns Σ float64(v)². Each square of a float32 is exact in
// float64; the vector loop adds them in 16 running sums rather than one,
// so the total can differ from the scalar loop's in its last bits.
func sumSquares(v []float32) float64 {
	n := len(v)
	if !useAVX || n < 16 {
		return sumSquaresScalar(v)
	}
	var s0, s1, s2, s3 archsimd.Float64x4
	i := 0
	for ; i+16 <= n; i += 16 {
		a0 := archsimd.LoadFloat32x4Slice(v[i:]).ConvertToFloat64()
		a1 := archsimd.LoadFloat32x4Slice(v[i+4:]).ConvertToFloat64()
		a2 := archsimd.LoadFloat32x4Slice(v[i+8:]).ConvertToFloat64()
		a3 := archsimd.LoadFloat32x4Slice(v[i+12:]).ConvertToFloat64()
		s0 = s0.Add(a0.Mul(a0))
		s1 = s1.Add(a1.Mul(a1))
		s2 = s2.Add(a2.Mul(a2))
		s3 = s3.Add(a3.Mul(a3))
	}
	var b [4]float64
	s0.Add(s1).Add(s2.Add(s3)).Store(&b)
	return (b[0] + b[1]) + (b[2] + b[3]) + sumSquaresScalar(v[i:])
}
