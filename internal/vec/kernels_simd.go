//go:build goexperiment.simd && amd64

package vec

import "simd/archsimd"

// The kernels use AVX2 and FMA when the CPU has them. FMA rounds once per
// multiply-add, so results can differ in the last bits from a build without
// GOEXPERIMENT=simd; within one build they are deterministic.
// useSIMD is the package's one CPU-feature switch: true when the CPU has
// AVX2 and FMA. It is read-only after package initialisation.
//
// Every kernel clears the AVX registers' upper halves
// (archsimd.ClearAVXUpperBits, VZEROUPPER) before scalar code runs: the
// compiler does not yet, and without it later SSE instructions (all scalar
// float arithmetic) wait on the dirty upper state. On 128-d vectors between
// scalar code that made one AVX2 distance 2–3 times slower than the scalar
// loop (BenchmarkSqDist32).
var useSIMD = archsimd.X86.AVX2() && archsimd.X86.FMA()

func hsum(s archsimd.Float64x4) float64 {
	var b [4]float64
	s.Store(&b)
	archsimd.ClearAVXUpperBits()
	return (b[0] + b[1]) + (b[2] + b[3])
}

// Dot returns Σ a[i]·b[i] (len(b) ≥ len(a)).
func Dot(a, b []float64) float64 {
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

// SqDist returns ‖a − b‖² (len(b) ≥ len(a)).
func SqDist(a, b []float64) float64 {
	n := len(a)
	if !useSIMD || n < 16 {
		return sqDistScalar(a, b)
	}
	b = b[:n]
	var s0, s1, s2, s3 archsimd.Float64x4
	i := 0
	for ; i+16 <= n; i += 16 {
		d0 := archsimd.LoadFloat64x4Slice(a[i:]).Sub(archsimd.LoadFloat64x4Slice(b[i:]))
		d1 := archsimd.LoadFloat64x4Slice(a[i+4:]).Sub(archsimd.LoadFloat64x4Slice(b[i+4:]))
		d2 := archsimd.LoadFloat64x4Slice(a[i+8:]).Sub(archsimd.LoadFloat64x4Slice(b[i+8:]))
		d3 := archsimd.LoadFloat64x4Slice(a[i+12:]).Sub(archsimd.LoadFloat64x4Slice(b[i+12:]))
		s0 = d0.MulAdd(d0, s0)
		s1 = d1.MulAdd(d1, s1)
		s2 = d2.MulAdd(d2, s2)
		s3 = d3.MulAdd(d3, s3)
	}
	for ; i+4 <= n; i += 4 {
		d0 := archsimd.LoadFloat64x4Slice(a[i:]).Sub(archsimd.LoadFloat64x4Slice(b[i:]))
		s0 = d0.MulAdd(d0, s0)
	}
	s := hsum(s0.Add(s1).Add(s2.Add(s3)))
	for ; i < n; i++ {
		d := a[i] - b[i]
		s += d * d
	}
	return s
}

// Axpy adds alpha·x to y (len(y) ≥ len(x)).
func Axpy(alpha float64, x, y []float64) {
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
	archsimd.ClearAVXUpperBits()
	for ; i < n; i++ {
		y[i] += alpha * x[i]
	}
}

// gemmTile adds A[i..i+4][k0:k1]·B[k0:k1][j..j+8] to C's 4 × 8 tile, the
// tile held in eight AVX2 registers.
func gemmTile(c, a, b []float64, i, j, k0, k1, k, p int) {
	if !useSIMD {
		for r := i; r < i+4; r++ {
			for jj := j; jj < j+8; jj++ {
				gemmScalar(c, a, b, r, jj, k0, k1, k, p)
			}
		}
		return
	}
	c0, c1, c2, c3 := c[i*p+j:i*p+j+8], c[(i+1)*p+j:(i+1)*p+j+8], c[(i+2)*p+j:(i+2)*p+j+8], c[(i+3)*p+j:(i+3)*p+j+8]
	s00, s01 := archsimd.LoadFloat64x4Slice(c0), archsimd.LoadFloat64x4Slice(c0[4:])
	s10, s11 := archsimd.LoadFloat64x4Slice(c1), archsimd.LoadFloat64x4Slice(c1[4:])
	s20, s21 := archsimd.LoadFloat64x4Slice(c2), archsimd.LoadFloat64x4Slice(c2[4:])
	s30, s31 := archsimd.LoadFloat64x4Slice(c3), archsimd.LoadFloat64x4Slice(c3[4:])
	a0, a1, a2, a3 := a[i*k+k0:i*k+k1], a[(i+1)*k+k0:(i+1)*k+k1], a[(i+2)*k+k0:(i+2)*k+k1], a[(i+3)*k+k0:(i+3)*k+k1]
	for kk := range a0 {
		row := b[(k0+kk)*p+j : (k0+kk)*p+j+8]
		b0, b1 := archsimd.LoadFloat64x4Slice(row), archsimd.LoadFloat64x4Slice(row[4:])
		x := archsimd.BroadcastFloat64x4(a0[kk])
		s00, s01 = b0.MulAdd(x, s00), b1.MulAdd(x, s01)
		x = archsimd.BroadcastFloat64x4(a1[kk])
		s10, s11 = b0.MulAdd(x, s10), b1.MulAdd(x, s11)
		x = archsimd.BroadcastFloat64x4(a2[kk])
		s20, s21 = b0.MulAdd(x, s20), b1.MulAdd(x, s21)
		x = archsimd.BroadcastFloat64x4(a3[kk])
		s30, s31 = b0.MulAdd(x, s30), b1.MulAdd(x, s31)
	}
	s00.StoreSlice(c0)
	s01.StoreSlice(c0[4:])
	s10.StoreSlice(c1)
	s11.StoreSlice(c1[4:])
	s20.StoreSlice(c2)
	s21.StoreSlice(c2[4:])
	s30.StoreSlice(c3)
	s31.StoreSlice(c3[4:])
	archsimd.ClearAVXUpperBits()
}

// gemm32Tile adds A[i..i+4][k0:k1]·B[k0:k1][j..j+16] to C's 4 × 16 tile,
// held in eight AVX2 registers.
func gemm32Tile(c, a, b []float32, i, j, k0, k1, k, p int) {
	if !useSIMD {
		for r := i; r < i+4; r++ {
			for jj := j; jj < j+16; jj++ {
				gemm32Scalar(c, a, b, r, jj, k0, k1, k, p)
			}
		}
		return
	}
	c0, c1, c2, c3 := c[i*p+j:i*p+j+16], c[(i+1)*p+j:(i+1)*p+j+16], c[(i+2)*p+j:(i+2)*p+j+16], c[(i+3)*p+j:(i+3)*p+j+16]
	s00, s01 := archsimd.LoadFloat32x8Slice(c0), archsimd.LoadFloat32x8Slice(c0[8:])
	s10, s11 := archsimd.LoadFloat32x8Slice(c1), archsimd.LoadFloat32x8Slice(c1[8:])
	s20, s21 := archsimd.LoadFloat32x8Slice(c2), archsimd.LoadFloat32x8Slice(c2[8:])
	s30, s31 := archsimd.LoadFloat32x8Slice(c3), archsimd.LoadFloat32x8Slice(c3[8:])
	a0, a1, a2, a3 := a[i*k+k0:i*k+k1], a[(i+1)*k+k0:(i+1)*k+k1], a[(i+2)*k+k0:(i+2)*k+k1], a[(i+3)*k+k0:(i+3)*k+k1]
	for kk := range a0 {
		row := b[(k0+kk)*p+j : (k0+kk)*p+j+16]
		b0, b1 := archsimd.LoadFloat32x8Slice(row), archsimd.LoadFloat32x8Slice(row[8:])
		x := archsimd.BroadcastFloat32x8(a0[kk])
		s00, s01 = b0.MulAdd(x, s00), b1.MulAdd(x, s01)
		x = archsimd.BroadcastFloat32x8(a1[kk])
		s10, s11 = b0.MulAdd(x, s10), b1.MulAdd(x, s11)
		x = archsimd.BroadcastFloat32x8(a2[kk])
		s20, s21 = b0.MulAdd(x, s20), b1.MulAdd(x, s21)
		x = archsimd.BroadcastFloat32x8(a3[kk])
		s30, s31 = b0.MulAdd(x, s30), b1.MulAdd(x, s31)
	}
	s00.StoreSlice(c0)
	s01.StoreSlice(c0[8:])
	s10.StoreSlice(c1)
	s11.StoreSlice(c1[8:])
	s20.StoreSlice(c2)
	s21.StoreSlice(c2[8:])
	s30.StoreSlice(c3)
	s31.StoreSlice(c3[8:])
	archsimd.ClearAVXUpperBits()
}

// SqDist32 returns ‖a − b‖² in float32 for len(a) ≤ len(b), with AVX2 when
// the CPU has it (two 8-lane accumulators: a 128-d descriptor is 16 lanes of 8).
func SqDist32(a, b []float32) float32 {
	n := len(a)
	if !useSIMD || n < 16 {
		return sqDist32Scalar(a, b)
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
	archsimd.ClearAVXUpperBits()
	s := ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
	for ; i < n; i++ {
		d := a[i] - b[i]
		s += d * d
	}
	return s
}

// SqDistRows128 writes ‖q − row‖² for consecutive 128-value rows into out
// (len(rows) ≥ 128·len(out)). Four rows share each load of q, each row
// has two accumulators, and the fixed size lets the compiler drop the
// bounds checks inside a row: the descriptor scan's inner loop.
func SqDistRows128(q *[128]float32, rows []float32, out []float32) {
	if !useSIMD {
		sqDistRows32Scalar(q[:], rows, out)
		return
	}
	n := len(out)
	r := 0
	for ; r+4 <= n; r += 4 {
		x0 := (*[128]float32)(rows[r*128:])
		x1 := (*[128]float32)(rows[(r+1)*128:])
		x2 := (*[128]float32)(rows[(r+2)*128:])
		x3 := (*[128]float32)(rows[(r+3)*128:])
		var a0, b0, a1, b1, a2, b2, a3, b3 archsimd.Float32x8
		for c := 0; c < 128; c += 16 {
			qa := archsimd.LoadFloat32x8((*[8]float32)(q[c : c+8]))
			qb := archsimd.LoadFloat32x8((*[8]float32)(q[c+8 : c+16]))
			d := archsimd.LoadFloat32x8((*[8]float32)(x0[c : c+8])).Sub(qa)
			a0 = d.MulAdd(d, a0)
			d = archsimd.LoadFloat32x8((*[8]float32)(x0[c+8 : c+16])).Sub(qb)
			b0 = d.MulAdd(d, b0)
			d = archsimd.LoadFloat32x8((*[8]float32)(x1[c : c+8])).Sub(qa)
			a1 = d.MulAdd(d, a1)
			d = archsimd.LoadFloat32x8((*[8]float32)(x1[c+8 : c+16])).Sub(qb)
			b1 = d.MulAdd(d, b1)
			d = archsimd.LoadFloat32x8((*[8]float32)(x2[c : c+8])).Sub(qa)
			a2 = d.MulAdd(d, a2)
			d = archsimd.LoadFloat32x8((*[8]float32)(x2[c+8 : c+16])).Sub(qb)
			b2 = d.MulAdd(d, b2)
			d = archsimd.LoadFloat32x8((*[8]float32)(x3[c : c+8])).Sub(qa)
			a3 = d.MulAdd(d, a3)
			d = archsimd.LoadFloat32x8((*[8]float32)(x3[c+8 : c+16])).Sub(qb)
			b3 = d.MulAdd(d, b3)
		}
		o := (*[4]float32)(out[r : r+4])
		o[0] = hsum8(a0.Add(b0))
		o[1] = hsum8(a1.Add(b1))
		o[2] = hsum8(a2.Add(b2))
		o[3] = hsum8(a3.Add(b3))
	}
	archsimd.ClearAVXUpperBits()
	for ; r < n; r++ {
		out[r] = SqDist32(q[:], rows[r*128:(r+1)*128])
	}
}

// hsum8 adds the eight lanes.
func hsum8(v archsimd.Float32x8) float32 {
	s := v.GetLo().Add(v.GetHi())
	s = s.AddPairs(s)
	s = s.AddPairs(s)
	return s.GetElem(0)
}

// Dot32 returns Σ a[i]·b[i] in float32 (len(b) ≥ len(a)).
func Dot32(a, b []float32) float32 {
	if !useSIMD || len(a) < 32 {
		return dot32Scalar(a, b)
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
	archsimd.ClearAVXUpperBits()
	s := (buf[0] + buf[1]) + (buf[2] + buf[3]) + (buf[4] + buf[5]) + (buf[6] + buf[7])
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// Dot32x4 returns the inner products of a with b0…b3 (each at least
// len(a) long), one load of a for four products.
func Dot32x4(a, b0, b1, b2, b3 []float32) (float32, float32, float32, float32) {
	if !useSIMD || len(a) < 8 {
		return dot32Scalar(a, b0), dot32Scalar(a, b1), dot32Scalar(a, b2), dot32Scalar(a, b3)
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
	r0, r1, r2, r3 := hsum32(s0), hsum32(s1), hsum32(s2), hsum32(s3)
	archsimd.ClearAVXUpperBits()
	for ; i < n; i++ {
		r0 += a[i] * b0[i]
		r1 += a[i] * b1[i]
		r2 += a[i] * b2[i]
		r3 += a[i] * b3[i]
	}
	return r0, r1, r2, r3
}

// hsum32 adds the eight lanes in pairs.
func hsum32(s archsimd.Float32x8) float32 {
	var buf [8]float32
	s.Store(&buf)
	return (buf[0] + buf[1]) + (buf[2] + buf[3]) + (buf[4] + buf[5]) + (buf[6] + buf[7])
}

// AxpyWiden adds alpha·float64(x[i]) to y[i] (len(y) ≥ len(x)). Each lane
// multiplies and adds as two rounded operations (no fused multiply-add),
// so the sums are bit-for-bit the plain loop's on every machine.
func AxpyWiden(alpha float64, x []float32, y []float64) {
	n := len(x)
	if !useSIMD || n < 16 {
		axpyWidenScalar(alpha, x, y)
		return
	}
	y = y[:n]
	al := archsimd.BroadcastFloat64x4(alpha)
	i := 0
	for ; i+16 <= n; i += 16 {
		a0 := archsimd.LoadFloat32x4Slice(x[i:]).ConvertToFloat64().Mul(al)
		a1 := archsimd.LoadFloat32x4Slice(x[i+4:]).ConvertToFloat64().Mul(al)
		a2 := archsimd.LoadFloat32x4Slice(x[i+8:]).ConvertToFloat64().Mul(al)
		a3 := archsimd.LoadFloat32x4Slice(x[i+12:]).ConvertToFloat64().Mul(al)
		archsimd.LoadFloat64x4Slice(y[i:]).Add(a0).StoreSlice(y[i:])
		archsimd.LoadFloat64x4Slice(y[i+4:]).Add(a1).StoreSlice(y[i+4:])
		archsimd.LoadFloat64x4Slice(y[i+8:]).Add(a2).StoreSlice(y[i+8:])
		archsimd.LoadFloat64x4Slice(y[i+12:]).Add(a3).StoreSlice(y[i+12:])
	}
	archsimd.ClearAVXUpperBits()
	axpyWidenScalar(alpha, x[i:], y[i:])
}

// SqNormWiden returns Σ float64(x[i])², the squared L2 norm in float64.
// Each square of a float32 is exact in float64 (so the fused multiply-add
// rounds exactly as a separate add would); the vector loop adds in 16
// running sums rather than one, so the total can differ from the plain
// loop's in its last bits. It is +Inf or NaN exactly when a value is not
// finite (the squares of up to 2³⁰ finite float32 values cannot overflow).
func SqNormWiden(x []float32) float64 {
	n := len(x)
	if !useSIMD || n < 16 {
		return sqNormWidenScalar(x)
	}
	var s0, s1, s2, s3 archsimd.Float64x4
	i := 0
	for ; i+16 <= n; i += 16 {
		a0 := archsimd.LoadFloat32x4Slice(x[i:]).ConvertToFloat64()
		a1 := archsimd.LoadFloat32x4Slice(x[i+4:]).ConvertToFloat64()
		a2 := archsimd.LoadFloat32x4Slice(x[i+8:]).ConvertToFloat64()
		a3 := archsimd.LoadFloat32x4Slice(x[i+12:]).ConvertToFloat64()
		s0 = a0.MulAdd(a0, s0)
		s1 = a1.MulAdd(a1, s1)
		s2 = a2.MulAdd(a2, s2)
		s3 = a3.MulAdd(a3, s3)
	}
	return hsum(s0.Add(s1).Add(s2.Add(s3))) + sqNormWidenScalar(x[i:])
}
