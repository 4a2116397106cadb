package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// SVDSquare must reconstruct full-rank and rank-deficient matrices with
// orthogonal factors (the rank-deficient case is the aligning adversary
// with fewer known people than dimensions).
func TestSVDSquare(t *testing.T) {
	const d = 10
	rng := rand.New(rand.NewPCG(5, 6))
	for _, rank := range []int{d, 4, 1, 0} {
		a := make([]float64, d*d)
		for range rank {
			u, v := make([]float64, d), make([]float64, d)
			for i := range d {
				u[i], v[i] = rng.NormFloat64(), rng.NormFloat64()
			}
			for i := range d {
				Axpy(u[i], v, a[i*d:(i+1)*d])
			}
		}
		u, s, v := SVDSquare(a, d)
		var worst float64
		for i := range d {
			for j := range d {
				var rec, uu, vv float64
				for k := range d {
					rec += u[i*d+k] * s[k] * v[j*d+k]
					uu += u[k*d+i] * u[k*d+j]
					vv += v[k*d+i] * v[k*d+j]
				}
				id := 0.0
				if i == j {
					id = 1
				}
				worst = math.Max(worst, math.Max(math.Abs(rec-a[i*d+j]), math.Max(math.Abs(uu-id), math.Abs(vv-id))))
			}
		}
		nonzero := 0
		for _, x := range s {
			if x > 1e-9 {
				nonzero++
			}
		}
		if worst > 1e-9 || nonzero != rank {
			t.Errorf("rank %d: worst error %.3g (reconstruction or orthogonality), %d non-zero singular values", rank, worst, nonzero)
		}
	}
}
