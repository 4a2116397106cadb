package vec

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

func randVec(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

func randVec32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestKernelsMatchPlainSums checks every length from 0 to 70 (all the
// SIMD loops' tails) against plain float64 sums, with tolerances relative
// to the sum of absolute terms.
func TestKernelsMatchPlainSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 70; n++ {
		a, b := randVec(rng, n), randVec(rng, n+3) // b may be longer
		var dot, dotAbs, sq float64
		for i := range a {
			dot += a[i] * b[i]
			dotAbs += math.Abs(a[i] * b[i])
			d := a[i] - b[i]
			sq += d * d
		}
		if got := Dot(a, b); math.Abs(got-dot) > 1e-14*(dotAbs+1) {
			t.Errorf("n=%d: Dot = %v, want %v", n, got, dot)
		}
		if got := SqDist(a, b); math.Abs(got-sq) > 1e-14*(sq+1) {
			t.Errorf("n=%d: SqDist = %v, want %v", n, got, sq)
		}
		y := append([]float64(nil), b...)
		Axpy(0.5, a, y)
		for i := range y {
			want := b[i]
			if i < n {
				want += 0.5 * a[i]
			}
			if math.Abs(y[i]-want) > 1e-15*(math.Abs(want)+1) {
				t.Fatalf("n=%d: Axpy y[%d] = %v, want %v", n, i, y[i], want)
			}
		}
		a32, b32 := randVec32(rng, n), randVec32(rng, n)
		var sq32 float64
		for i := range a32 {
			d := float64(a32[i]) - float64(b32[i])
			sq32 += d * d
		}
		if got := float64(SqDist32(a32, b32)); math.Abs(got-sq32) > 1e-5*(1+sq32) {
			t.Errorf("n=%d: SqDist32 = %v, want %v", n, got, sq32)
		}
		bs := [4][]float32{b32, randVec32(rng, n), randVec32(rng, n), a32}
		var want [4]float64
		for k, bk := range bs {
			for i := range a32 {
				want[k] += float64(a32[i]) * float64(bk[i])
			}
		}
		if got := float64(Dot32(a32, b32)); math.Abs(got-want[0]) > 1e-5*(1+math.Abs(want[0])) {
			t.Errorf("n=%d: Dot32 = %v, want %v", n, got, want[0])
		}
		g0, g1, g2, g3 := Dot32x4(a32, bs[0], bs[1], bs[2], bs[3])
		for k, got := range []float32{g0, g1, g2, g3} {
			if math.Abs(float64(got)-want[k]) > 1e-5*(1+math.Abs(want[k])) {
				t.Errorf("n=%d: Dot32x4[%d] = %v, want %v", n, k, got, want[k])
			}
		}
	}
}

func TestSqDistRows128(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	q := (*[128]float32)(randVec32(rng, 128))
	for _, n := range []int{0, 1, 3, 4, 5, 9, 16} {
		rows := randVec32(rng, n*128)
		got, want := make([]float32, n), make([]float32, n)
		SqDistRows128(q, rows, got)
		sqDistRows32Scalar(q[:], rows, want)
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-4*(1+float64(want[i])) {
				t.Fatalf("n=%d row %d: %v, want %v", n, i, got[i], want[i])
			}
		}
	}
}

func TestSymEig(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 5, 16} {
		b := randVec(rng, n*n)
		a := make([]float64, n*n) // symmetric: A = B + Bᵀ
		for i := range n {
			for j := range n {
				a[i*n+j] = b[i*n+j] + b[j*n+i]
			}
		}
		orig := append([]float64(nil), a...)
		vals, vecs := SymEig(a, n)
		for i := range a {
			if a[i] != orig[i] {
				t.Fatal("SymEig modified its input")
			}
		}
		for r := range n {
			if r > 0 && vals[r] > vals[r-1] {
				t.Fatalf("n=%d: eigenvalues not descending: %v", n, vals)
			}
			v := vecs[r*n : (r+1)*n]
			if nv := math.Sqrt(Dot(v, v)); math.Abs(nv-1) > 1e-10 {
				t.Fatalf("n=%d: eigenvector %d has norm %v", n, r, nv)
			}
			for i := range n { // (A v)_i = λ v_i
				if av := Dot(a[i*n:(i+1)*n], v); math.Abs(av-vals[r]*v[i]) > 1e-9*(1+math.Abs(vals[r])) {
					t.Fatalf("n=%d: (A v%d)[%d] = %v, want %v", n, r, i, av, vals[r]*v[i])
				}
			}
		}
	}
}

func TestParallelForCoversEachIndexOnce(t *testing.T) {
	for _, tc := range []struct{ n, workers int }{{0, 4}, {1, 4}, {7, 1}, {7, 3}, {100, 4}, {101, 8}} {
		hits := make([]atomic.Int32, tc.n)
		ParallelFor(tc.n, tc.workers, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("n=%d workers=%d: index %d run %d times", tc.n, tc.workers, i, h)
			}
		}
	}
}

// BenchmarkSqDist32 scans 512 descriptors for those near the first, as
// clustering does: the kernel between scalar code, where leaving the AVX
// registers' upper halves dirty would slow every scalar instruction after.
func BenchmarkSqDist32(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	descs := make([][]float32, 512)
	for i := range descs {
		descs[i] = randVec32(rng, 128)
	}
	for _, k := range []struct {
		name string
		f    func(a, b []float32) float32
	}{{"vec", SqDist32}, {"scalar", sqDist32Scalar}} {
		b.Run(k.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				for _, d := range descs {
					if k.f(descs[0], d) <= 200 {
						n++
					}
				}
			}
		})
	}
}
