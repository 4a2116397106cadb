package nets

import (
	"math"
	"math/rand/v2"
	"testing"
)

// tinyConv0PoolReference is tinyConv0Pool written out in float64: the
// normalised input, the 3×3 VALID convolution, the 2×2 stride-2 SAME
// max-pool, the bias and the leaky ReLU.
func tinyConv0PoolReference(in []float64, h, w int, filter, bias []float64) (out []float64, ph, pw int) {
	ch, cw := h-2, w-2
	conv := make([]float64, ch*cw*16)
	for y := range ch {
		for x := range cw {
			for co := range 16 {
				s := 0.0
				for ky := range 3 {
					for kx := range 3 {
						for ci := range 3 {
							v := (in[((y+ky)*w+x+kx)*3+ci] - float64(tinyMeanRGB[ci])) / 255
							s += v * filter[((ky*3+kx)*3+ci)*16+co]
						}
					}
				}
				conv[(y*cw+x)*16+co] = s
			}
		}
	}
	ph, pw = (ch+1)/2, (cw+1)/2
	out = make([]float64, ph*pw*16)
	for py := range ph {
		for px := range pw {
			for co := range 16 {
				m := math.Inf(-1)
				for _, y := range []int{2 * py, min(2*py+1, ch-1)} {
					for _, x := range []int{2 * px, min(2*px+1, cw-1)} {
						m = math.Max(m, conv[(y*cw+x)*16+co])
					}
				}
				v := m + bias[co]
				out[(py*pw+px)*16+co] = math.Max(v, 0.1*v)
			}
		}
	}
	return out, ph, pw
}

// TestTinyConv0Pool checks the fused first layer against the float64
// reference on random inputs whose sizes exercise the odd edges: an odd
// convolution output (the last pooled row and column repeat their pixel)
// and row lengths that are not a multiple of the four pixels the AVX2
// kernel computes together.
func TestTinyConv0Pool(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	filter := make([]float32, 27*16)
	filter64 := make([]float64, len(filter))
	for i := range filter {
		filter[i] = float32(rng.NormFloat64())
		filter64[i] = float64(filter[i])
	}
	bias := make([]float32, 16)
	bias64 := make([]float64, 16)
	for i := range bias {
		bias[i] = float32(rng.NormFloat64())
		bias64[i] = float64(bias[i])
	}
	for _, size := range [][2]int{{3, 3}, {7, 9}, {35, 35}, {36, 41}, {64, 64}} {
		h, w := size[0], size[1]
		in := make([]float32, h*w*3)
		in64 := make([]float64, len(in))
		for i := range in {
			in[i] = float32(rng.IntN(256))
			in64[i] = float64(in[i])
		}
		got, ph, pw := tinyConv0Pool(newKernPar(nil), &detArena{}, in, h, w, filter, bias)
		want, wph, wpw := tinyConv0PoolReference(in64, h, w, filter64, bias64)
		if ph != wph || pw != wpw || len(got) != len(want) {
			t.Fatalf("%d×%d: got %d×%d (%d values), want %d×%d (%d)", h, w, ph, pw, len(got), wph, wpw, len(want))
		}
		for i := range want {
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5*(1+math.Abs(want[i])) {
				t.Fatalf("%d×%d: value %d (pixel %d, channel %d) is %g, want %g", h, w, i, i/16, i%16, got[i], want[i])
			}
		}
	}
}

// TestTinyConv0RowGeneric checks the portable row kernel (used without
// AVX2 and for row tails) against the float64 reference through a
// one-row pooling of two equal rows.
func TestTinyConv0RowGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const w = 11
	in := make([]float32, 3*w*3)
	for i := range in {
		in[i] = float32(rng.NormFloat64())
	}
	filter := make([]float32, 27*16)
	for i := range filter {
		filter[i] = float32(rng.NormFloat64())
	}
	got := make([]float32, (w-2)*16)
	tinyConv0RowGeneric(got, in, w, filter)
	simd := make([]float32, (w-2)*16)
	tinyConv0Row(simd, in, w, filter)
	for x := range w - 2 {
		for co := range 16 {
			s := 0.0
			for ky := range 3 {
				for j := range 9 {
					s += float64(in[ky*w*3+x*3+j]) * float64(filter[(ky*9+j)*16+co])
				}
			}
			if d := math.Abs(float64(got[x*16+co]) - s); d > 1e-5*(1+math.Abs(s)) {
				t.Fatalf("generic: pixel %d channel %d is %g, want %g", x, co, got[x*16+co], s)
			}
			if d := math.Abs(float64(simd[x*16+co]) - s); d > 1e-5*(1+math.Abs(s)) {
				t.Fatalf("dispatched: pixel %d channel %d is %g, want %g", x, co, simd[x*16+co], s)
			}
		}
	}
}
