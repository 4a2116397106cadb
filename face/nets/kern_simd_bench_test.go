package nets

import (
	"math/rand/v2"
	"testing"
)

// The benchmarks below time each SIMD kernel of the package alone, its
// portable version alone, a fixed piece of scalar float work alone, and
// the kernel followed by that scalar work. Go's compiler emits no
// VZEROUPPER after AVX code, so a kernel that returns with the AVX
// registers' upper halves dirty slows every scalar (SSE) float instruction
// after it: then "simd+scalar" costs much more than "simd" plus "scalar"
// (internal/vec measured 2–3× on its 128-d distance).

// benchScalarWork is scalar float32 work of the kind that follows the
// kernels in a pass (a pooling row's max, bias and leaky ReLU).
//
//go:noinline
func benchScalarWork(x []float32, b []float32) float32 {
	var s float32
	for i, v := range x {
		w := max(v, v*0.1) + b[i&15]
		s += w * w
	}
	return s
}

func benchRand(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// benchKernel runs the four sub-benchmarks of one kernel.
func benchKernel(b *testing.B, simd, generic func()) {
	r := rand.New(rand.NewPCG(5, 6))
	x, bias := benchRand(r, 512), benchRand(r, 16)
	var sink float32
	b.Run("simd", func(b *testing.B) {
		for b.Loop() {
			simd()
		}
	})
	b.Run("generic", func(b *testing.B) {
		for b.Loop() {
			generic()
		}
	})
	b.Run("scalar", func(b *testing.B) {
		for b.Loop() {
			sink += benchScalarWork(x, bias)
		}
	})
	b.Run("simd+scalar", func(b *testing.B) {
		for b.Loop() {
			simd()
			sink += benchScalarWork(x, bias)
		}
	})
	_ = sink
}

func BenchmarkSIMDDwRow(b *testing.B) {
	const w, c = 34, 64 // a 32-pixel output row of 64 channels
	r := rand.New(rand.NewPCG(1, 2))
	in, wt, bias := benchRand(r, 3*w*c), benchRand(r, 9*c), benchRand(r, c)
	out := make([]float32, 32*c)
	generic := func() {
		var src, wk [9][]float32
		for ox := range 32 {
			for k := range 9 {
				ky, kx := k/3, k%3
				src[k] = in[(ky*w+ox+kx)*c : (ky*w+ox+kx+1)*c]
				wk[k] = wt[k*c : (k+1)*c]
			}
			detDwPixelGeneric(out[ox*c:(ox+1)*c], src[:], wk[:], bias, true)
		}
	}
	benchKernel(b, func() { detDwRow(out, in, w, c, 1, 0, wt, bias, true) }, generic)
}

func BenchmarkSIMDDwPixel(b *testing.B) {
	const c = 64
	r := rand.New(rand.NewPCG(1, 3))
	var src, wk [9][]float32
	for k := range 9 {
		src[k], wk[k] = benchRand(r, c), benchRand(r, c)
	}
	bias, out := benchRand(r, c), make([]float32, c)
	benchKernel(b, func() { detDwPixel(out, src[:], wk[:], bias, true) },
		func() { detDwPixelGeneric(out, src[:], wk[:], bias, true) })
}

func BenchmarkSIMDAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 4))
	o, bias := benchRand(r, 25), benchRand(r, 25) // the tiny detector's head: 25 values per cell
	benchKernel(b, func() { detAdd(o, bias) }, func() { detAddGeneric(o, bias) })
}

func BenchmarkSIMDRelu6(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 5))
	o := benchRand(r, 64)
	benchKernel(b, func() { detRelu6(o) }, func() { detRelu6Generic(o) })
}

func BenchmarkSIMDTinyConv0Row(b *testing.B) {
	const w = 66 // a 64-pixel output row
	r := rand.New(rand.NewPCG(1, 6))
	in, filter := benchRand(r, 3*w*3), benchRand(r, 27*tinyConv0Out)
	out := make([]float32, (w-2)*tinyConv0Out)
	benchKernel(b, func() { tinyConv0Row(out, in, w, filter) }, func() { tinyConv0RowGeneric(out, in, w, filter) })
}

func BenchmarkSIMDGemmBlock(b *testing.B) {
	const kc = 64
	r := rand.New(rand.NewPCG(1, 7))
	a, panel := benchRand(r, kernGemmMR*kc), benchRand(r, kc*kernGemmPanel)
	y := make([]float32, kernGemmMR*kernGemmPanel)
	benchKernel(b, func() { kernGemmBlock(y, kernGemmPanel, a, kc, kc, panel, false) },
		func() { kernGemmBlockGeneric(y, kernGemmPanel, a, kc, kc, panel, false) })
}
