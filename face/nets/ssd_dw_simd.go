//go:build goexperiment.simd && amd64

package nets

import "simd/archsimd"

var (
	detHasAVX2   = archsimd.X86.AVX2() && archsimd.X86.FMA()
	detHasAVX512 = archsimd.X86.AVX512()
)

// Every archsimd kernel of the package clears the AVX registers' upper
// halves (archsimd.ClearAVXUpperBits, VZEROUPPER) before scalar code runs,
// as internal/vec's do: Go 1.26's compiler does not, and with the upper
// state dirty every later SSE instruction (all scalar float arithmetic)
// waits on it. Measured with BenchmarkSIMD* (kern_simd_bench_test.go): see
// docs/results.md.

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
	if detHasAVX2 || detHasAVX512 {
		archsimd.ClearAVXUpperBits()
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
	archsimd.ClearAVXUpperBits()
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
	archsimd.ClearAVXUpperBits()
	detRelu6Generic(o[i:])
}

// detDwRow computes len(out)/c output pixels of a 3×3 depthwise
// convolution whose windows lie inside the three input rows in (each of w
// pixels of c channels), the first window starting at column x0 and each
// next one s columns further, and reports whether it did: it needs AVX2
// and c a multiple of 8. Per block of 8 channels the nine filter taps and
// the bias stay in registers while the row is swept, so each output
// vector costs nine loads and nine multiply-adds (detDwPixel reloads the
// taps and rebuilds nine slices for every pixel).
func detDwRow(out, in []float32, w, c, s, x0 int, wt, b []float32, relu6 bool) bool {
	if !detHasAVX2 || c%8 != 0 {
		return false
	}
	n := len(out) / c
	r0, r1, r2 := in[:w*c], in[w*c:2*w*c], in[2*w*c:3*w*c]
	_ = r2[((x0+(n-1)*s)+2)*c+c-1] // the last window is inside the rows
	wt = wt[:9*c]
	zero, six := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(6)
	for j := 0; j < c; j += 8 {
		w0 := archsimd.LoadFloat32x8Slice(wt[j:])
		w1 := archsimd.LoadFloat32x8Slice(wt[c+j:])
		w2 := archsimd.LoadFloat32x8Slice(wt[2*c+j:])
		w3 := archsimd.LoadFloat32x8Slice(wt[3*c+j:])
		w4 := archsimd.LoadFloat32x8Slice(wt[4*c+j:])
		w5 := archsimd.LoadFloat32x8Slice(wt[5*c+j:])
		w6 := archsimd.LoadFloat32x8Slice(wt[6*c+j:])
		w7 := archsimd.LoadFloat32x8Slice(wt[7*c+j:])
		w8 := archsimd.LoadFloat32x8Slice(wt[8*c+j:])
		bj := archsimd.LoadFloat32x8Slice(b[j:])
		for p := range n {
			i := (x0+p*s)*c + j
			acc := archsimd.LoadFloat32x8Slice(r0[i:]).MulAdd(w0, bj)
			acc = archsimd.LoadFloat32x8Slice(r0[i+c:]).MulAdd(w1, acc)
			acc = archsimd.LoadFloat32x8Slice(r0[i+2*c:]).MulAdd(w2, acc)
			acc = archsimd.LoadFloat32x8Slice(r1[i:]).MulAdd(w3, acc)
			acc = archsimd.LoadFloat32x8Slice(r1[i+c:]).MulAdd(w4, acc)
			acc = archsimd.LoadFloat32x8Slice(r1[i+2*c:]).MulAdd(w5, acc)
			acc = archsimd.LoadFloat32x8Slice(r2[i:]).MulAdd(w6, acc)
			acc = archsimd.LoadFloat32x8Slice(r2[i+c:]).MulAdd(w7, acc)
			acc = archsimd.LoadFloat32x8Slice(r2[i+2*c:]).MulAdd(w8, acc)
			if relu6 {
				acc = acc.Max(zero).Min(six)
			}
			acc.StoreSlice(out[p*c+j:])
		}
	}
	archsimd.ClearAVXUpperBits()
	return true
}
