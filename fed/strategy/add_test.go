package strategy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddScaledEqualsScalar: the vector kernel's sums are bit-for-bit the
// scalar loop's, at every length around the vector widths, including
// subnormal, huge and negative values.
func TestAddScaledEqualsScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []float32{0, -0, 1e-45, -3.4e38, 3.4e38, 1.17549435e-38, 0.1, -7.25}
	for _, n := range []int{0, 1, 3, 15, 16, 17, 31, 32, 33, 100, 1027} {
		for _, w := range []float64{1, 0.3, 1e-300, 7e10} {
			src := make([]float32, n)
			for i := range src {
				if i < len(special) && n > 20 {
					src[i] = special[i]
				} else {
					src[i] = float32(rng.NormFloat64()) * float32(math.Pow(10, float64(rng.IntN(9)-4)))
				}
			}
			got := make([]float64, n+1)
			want := make([]float64, n+1)
			for i := range got {
				got[i] = rng.NormFloat64()
				want[i] = got[i]
			}
			addScaled(got, w, src)
			addScaledScalar(want, w, src)
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("n=%d w=%g: value %d is %v, the scalar loop gives %v", n, w, i, got[i], want[i])
				}
			}
		}
	}
}

func BenchmarkSumAdd(b *testing.B) {
	const n = 557824
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i%97) * 0.01
	}
	dst := make([]float64, n)
	b.SetBytes(4 * n)
	for b.Loop() {
		addScaled(dst, 1, src)
	}
}
