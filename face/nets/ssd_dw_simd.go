//go:build goexperiment.simd && amd64

package nets

import "simd/archsimd"

var (
	detHasAVX2   = archsimd.X86.AVX2() && archsimd.X86.FMA()
	detHasAVX512 = archsimd.X86.AVX512()
)

// detDwPixel computes o = b + Σ_t src[t]·wk[t] element-wise, then relu6 if
// relu6 is set, keeping
// each 16 (AVX-512) or 8 (AVX2) channel accumulator in a register across the
// taps.
func detDwPixel(o []float32, src, wk [][]float32, b []float32, relu6 bool) {
	n := len(o)
	j := 0
	if detHasAVX512 {
		zero, six := archsimd.BroadcastFloat32x16(0), archsimd.BroadcastFloat32x16(6)
		for ; j+16 <= n; j += 16 {
			acc := archsimd.LoadFloat32x16Slice(b[j:])
			for t := range src {
				acc = archsimd.LoadFloat32x16Slice(src[t][j:]).MulAdd(archsimd.LoadFloat32x16Slice(wk[t][j:]), acc)
			}
			if relu6 {
				acc = acc.Max(zero).Min(six)
			}
			acc.StoreSlice(o[j:])
		}
	}
	if detHasAVX2 {
		zero, six := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(6)
		for ; j+8 <= n; j += 8 {
			acc := archsimd.LoadFloat32x8Slice(b[j:])
			for t := range src {
				acc = archsimd.LoadFloat32x8Slice(src[t][j:]).MulAdd(archsimd.LoadFloat32x8Slice(wk[t][j:]), acc)
			}
			if relu6 {
				acc = acc.Max(zero).Min(six)
			}
			acc.StoreSlice(o[j:])
		}
	}
	if j < n {
		tail := make([][]float32, len(src))
		wtail := make([][]float32, len(wk))
		for t := range src {
			tail[t], wtail[t] = src[t][j:], wk[t][j:]
		}
		detDwPixelGeneric(o[j:], tail, wtail, b[j:], relu6)
	}
}

// detAdd computes o += b element-wise.
func detAdd(o, b []float32) {
	if !detHasAVX2 {
		detAddGeneric(o, b)
		return
	}
	n := len(o)
	b = b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		x := archsimd.LoadFloat32x8Slice(o[i:])
		x.Add(archsimd.LoadFloat32x8Slice(b[i:])).StoreSlice(o[i:])
	}
	detAddGeneric(o[i:], b[i:])
}

// detRelu6 clamps every value to [0, 6].
func detRelu6(o []float32) {
	if !detHasAVX2 {
		detRelu6Generic(o)
		return
	}
	zero, six := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(6)
	i := 0
	for ; i+8 <= len(o); i += 8 {
		archsimd.LoadFloat32x8Slice(o[i:]).Max(zero).Min(six).StoreSlice(o[i:])
	}
	detRelu6Generic(o[i:])
}
