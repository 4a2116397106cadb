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

// sqDistRows128 writes ‖q − row‖² for consecutive 128-value rows into out
// (len(rows) ≥ 128·len(out)). Four rows share each load of q, each row
// has two accumulators, and the fixed size lets the compiler drop the
// bounds checks inside a row: the descriptor scan's inner loop.
func sqDistRows128(q *[128]float32, rows []float32, out []float32) {
	if !useSIMD {
		sqDistRowsScalar(q[:], rows, out)
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
	for ; r < n; r++ {
		out[r] = sqDist(q[:], rows[r*128:(r+1)*128])
	}
}

// hsum8 adds the eight lanes.
func hsum8(v archsimd.Float32x8) float32 {
	s := v.GetLo().Add(v.GetHi())
	s = s.AddPairs(s)
	s = s.AddPairs(s)
	return s.GetElem(0)
}
