package wire

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestNormChecksFiniteness: Norm is the exact norm within float64
// rounding, and any NaN or infinity anywhere (also in the vector lanes
// and the scalar tail) makes it non-finite, which is how the coordinator
// refuses such updates in one pass.
func TestNormChecksFiniteness(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 15, 16, 17, 33, 1000, 4099} {
		v := make([]float32, n)
		var want float64
		for i := range v {
			v[i] = float32(rng.NormFloat64())
			want += float64(v[i]) * float64(v[i])
		}
		w := Weights{{Name: "w", Shape: []int{n}, Values: v}}
		if got := w.Norm(); math.Abs(got*got-want) > 1e-12*want {
			t.Errorf("n=%d: the norm² is %v, the plain loop gives %v", n, got*got, want)
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			for _, at := range []int{0, n / 2, n - 1} {
				w := Weights{{Name: "w", Shape: []int{n}, Values: append([]float32(nil), v...)}}
				w[0].Values[at] = bad
				if nn := w.Norm(); !math.IsNaN(nn) && !math.IsInf(nn, 0) {
					t.Errorf("n=%d: %v at %d gives the finite norm %v", n, bad, at, nn)
				}
			}
		}
		// The largest float32 values square without overflow.
		big := Weights{{Name: "w", Shape: []int{n}, Values: make([]float32, n)}}
		for i := range big[0].Values {
			big[0].Values[i] = math.MaxFloat32
		}
		if nn := big.Norm(); math.IsInf(nn, 0) || math.Abs(nn-math.MaxFloat32*math.Sqrt(float64(n))) > 1e-9*nn {
			t.Errorf("n=%d: the norm of MaxFloat32 values is %v", n, nn)
		}
	}
}

func BenchmarkNorm(b *testing.B) {
	const n = 557824
	w := Weights{{Name: "w", Shape: []int{n}, Values: make([]float32, n)}}
	for i := range w[0].Values {
		w[0].Values[i] = float32(i%89) * 0.01
	}
	b.SetBytes(4 * n)
	for b.Loop() {
		_ = w.Norm()
	}
}
