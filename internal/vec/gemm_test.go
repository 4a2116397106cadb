package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestGEMM(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	for _, sz := range [][3]int{{1, 1, 1}, {4, 3, 8}, {5, 7, 9}, {67, 300, 17}, {130, 128, 128}} {
		m, k, p := sz[0], sz[1], sz[2]
		a, b := make([]float64, m*k), make([]float64, k*p)
		for i := range a {
			a[i] = rng.NormFloat64()
		}
		for i := range b {
			b[i] = rng.NormFloat64()
		}
		c := make([]float64, m*p)
		for i := range c {
			c[i] = math.NaN() // Gemm must overwrite
		}
		Gemm(c, a, b, m, k, p, 2)
		for i := range m {
			for j := range p {
				var s float64
				for kk := range k {
					s += a[i*k+kk] * b[kk*p+j]
				}
				if math.Abs(c[i*p+j]-s) > 1e-12*float64(k) {
					t.Fatalf("%d×%d×%d: C[%d][%d] = %v, want %v", m, k, p, i, j, c[i*p+j], s)
				}
			}
		}
	}
}

// BenchmarkGEMM is the transform's product for 5,000 faces: (5000 × 128)·(128 × 128).
func BenchmarkGEMM(b *testing.B) {
	const m, k, p = 5000, 128, 128
	a, bb, c := make([]float64, m*k), make([]float64, k*p), make([]float64, m*p)
	for i := range a {
		a[i] = float64(i%7) - 3
	}
	for i := range bb {
		bb[i] = float64(i%5) - 2
	}
	for b.Loop() {
		Gemm(c, a, bb, m, k, p, 1)
	}
	b.ReportMetric(float64(m*k*p)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFMA/s")
}

func TestGEMM32(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	for _, sz := range [][3]int{{1, 1, 1}, {4, 3, 16}, {5, 7, 19}, {67, 300, 40}} {
		m, k, p := sz[0], sz[1], sz[2]
		a, b := make([]float32, m*k), make([]float32, k*p)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		c := make([]float32, m*p)
		for i := range c {
			c[i] = float32(math.NaN())
		}
		Gemm32(c, a, b, m, k, p)
		for i := range m {
			for j := range p {
				var s, abs float64
				for kk := range k {
					s += float64(a[i*k+kk]) * float64(b[kk*p+j])
					abs += math.Abs(float64(a[i*k+kk]) * float64(b[kk*p+j]))
				}
				if math.Abs(float64(c[i*p+j])-s) > 1e-6*abs+1e-6 {
					t.Fatalf("%d×%d×%d: C[%d][%d] = %v, want %v", m, k, p, i, j, c[i*p+j], s)
				}
			}
		}
	}
}
