package dplc

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

func seeded(b byte) *dp.Source {
	var s [32]byte
	s[0] = b
	return dp.NewSeededSource(s)
}

// synthetic returns k clusters of per unit vectors in dimension d: each at
// an angle uniform in [0, spread] from its cluster direction.
func synthetic(src *dp.Source, k, per, d int, spread float64) [][]float32 {
	unit := func() []float64 {
		v := make([]float64, d)
		src.AddGaussian64(v, 1)
		var n float64
		for _, x := range v {
			n += x * x
		}
		n = math.Sqrt(n)
		for i := range v {
			v[i] /= n
		}
		return v
	}
	var out [][]float32
	for range k {
		c := unit()
		for range per {
			u := unit()
			var pr float64
			for i := range u {
				pr += u[i] * c[i]
			}
			var n float64
			for i := range u {
				u[i] -= pr * c[i]
				n += u[i] * u[i]
			}
			n = math.Sqrt(n)
			a := spread * src.Float64()
			w := make([]float32, d)
			for i := range w {
				w[i] = float32(c[i]*math.Cos(a) + u[i]/n*math.Sin(a))
			}
			out = append(out, w)
		}
	}
	return out
}

func TestSigmaTheorem2(t *testing.T) {
	// Hand value: (2/512)·√((1 − cos 2.4)·ln(1.25/5e-5)) = 0.0163847…
	got, err := Sigma(512, 1.2, 1, 5e-5)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-0.0163847) > 2e-7 {
		t.Errorf("Sigma(512, 1.2, 1, 5e-5) = %.7f, want 0.0163847", got)
	}
	// Theorem 2 is the classic Gaussian bound at the proof's sensitivity.
	for _, tc := range []struct {
		size        int
		rho, e, dlt float64
	}{{100, 0.5, 0.5, 1e-5}, {1000, 1.3, 1, 1e-6}, {7, 1.5, 2, 1e-3}} {
		s, _ := Sigma(tc.size, tc.rho, tc.e, tc.dlt)
		c, _ := dp.ClassicGaussianSigma(Sensitivity(tc.size, tc.rho), tc.e, tc.dlt)
		if math.Abs(s-c) > 1e-12*c {
			t.Errorf("%v: Theorem 2 σ %g, classic at Theorem-2 sensitivity %g", tc, s, c)
		}
	}
}

func TestSensitivityIsWorstCase(t *testing.T) {
	// Two unit vectors at angle ρ on opposite sides of w_o are 2 sin ρ apart.
	for _, rho := range []float64{0.3, 1, 1.3} {
		w := []float64{math.Cos(rho), math.Sin(rho)}
		w2 := []float64{math.Cos(rho), -math.Sin(rho)}
		dist := math.Hypot(w[0]-w2[0], w[1]-w2[1])
		if got := Sensitivity(1, rho); math.Abs(got-dist) > 1e-12 {
			t.Errorf("ρ=%g: sensitivity %g, worst-case distance %g", rho, got, dist)
		}
	}
}

func TestOccupancyRatio(t *testing.T) {
	// Exact small cases: circle ρ/π, 2-sphere (1 − cos ρ)/2.
	for _, rho := range []float64{0.2, 1, 1.5, 2.5} {
		c, _ := OccupancyRatio(2, rho)
		if math.Abs(c-rho/math.Pi) > 1e-10 {
			t.Errorf("d=2, ρ=%g: %g, want %g", rho, c, rho/math.Pi)
		}
		s, _ := OccupancyRatio(3, rho)
		if math.Abs(s-(1-math.Cos(rho))/2) > 1e-10 {
			t.Errorf("d=3, ρ=%g: %g, want %g", rho, s, (1-math.Cos(rho))/2)
		}
	}
	// The paper's figures for d = 512 (Section 3): 0.055, 5e-5, 4e-10.
	for _, tc := range []struct{ rho, want, tol float64 }{{1.5, 0.055, 0.02}, {1.4, 5e-5, 0.15}, {1.3, 4e-10, 0.15}} {
		got, err := OccupancyRatio(512, tc.rho)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got/tc.want-1) > tc.tol {
			t.Errorf("d=512, ρ=%g: %g, paper says %g", tc.rho, got, tc.want)
		}
	}
	// Monte Carlo in d = 8.
	src := seeded(5)
	const n = 200000
	hit := 0
	v := make([]float64, 8)
	for range n {
		clear(v)
		src.AddGaussian64(v, 1)
		var s float64
		for _, x := range v {
			s += x * x
		}
		if v[0]/math.Sqrt(s) >= math.Cos(1.0) {
			hit++
		}
	}
	want, _ := OccupancyRatio(8, 1.0)
	if p := float64(hit) / n; math.Abs(p-want) > 5*math.Sqrt(want*(1-want)/n) {
		t.Errorf("d=8, ρ=1: Monte Carlo %g, formula %g", p, want)
	}
	if _, err := OccupancyRatio(1, 1); err == nil {
		t.Error("d=1 accepted")
	}
}

func cosine(a, b []float32) float64 {
	var s, na, nb float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return s / math.Sqrt(na*nb)
}

func TestRunFigure4Behaviour(t *testing.T) {
	// PrivacyFace Figure 4: with ρ ≥ 1.2, ε = 1 and |S| ≥ 512 the noisy
	// centre keeps cosine > 0.7 with the exact one. As in the figure, each
	// cluster's mean is released many times (200 noise draws here).
	centres := synthetic(seeded(1), 3, 600, 512, 0.9)
	for _, rho := range []float64{1.2, 1.3} {
		p := Params{Margin: rho, MinSize: 512, MaxQueries: 3, Epsilon: 1, Delta: 5e-5}
		res, err := Run(centres, p, seeded(10))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Clusters) == 0 {
			t.Fatalf("ρ=%g: no cluster of size ≥ 512 found", rho)
		}
		worst := 1.0
		src := seeded(11)
		for _, c := range res.Clusters {
			if c.Size < 512 {
				t.Fatalf("released a cluster of size %d < T", c.Size)
			}
			if n := cosine(c.Center, c.Center); math.Abs(n-1) > 1e-5 {
				t.Fatal("center not normalised")
			}
			worst = math.Min(worst, cosine(c.Center, c.Exact))
			for range 200 {
				v := make([]float64, len(c.Exact))
				src.AddGaussian64(v, c.Sigma)
				hat := make([]float32, len(v))
				for i := range v {
					hat[i] = float32(float64(c.Exact[i])*c.MeanNorm + v[i])
				}
				worst = math.Min(worst, cosine(hat, c.Exact))
			}
		}
		if worst <= 0.7 {
			t.Errorf("ρ=%g: worst cosine(p, p̂) = %.3f, paper reports > 0.7", rho, worst)
		}
		t.Logf("ρ=%g: %d clusters, worst cosine(p, p̂) = %.3f", rho, len(res.Clusters), worst)
	}
	// With far fewer members the noise swamps the centre (the T guard matters).
	small := synthetic(seeded(2), 1, 20, 512, 0.9)
	res, err := Run(small, Params{Margin: 1.2, MinSize: 1, MaxQueries: 1, Epsilon: 1, Delta: 5e-5}, seeded(3))
	if err != nil {
		t.Fatal(err)
	}
	if c := cosine(res.Clusters[0].Center, res.Clusters[0].Exact); c > 0.5 {
		t.Errorf("|S|=20: cosine %.3f, expected noise to dominate", c)
	}
}

func TestDotMatchesScalar(t *testing.T) {
	src := seeded(12)
	for _, n := range []int{0, 1, 7, 8, 31, 32, 33, 100, 512, 1000} {
		a, b := make([]float32, n), make([]float32, n)
		src.AddGaussian32(a, 1)
		src.AddGaussian32(b, 1)
		var want float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
		}
		if got := dot(a, b); math.Abs(float64(got)-want) > 1e-4*(1+math.Abs(want)) {
			t.Errorf("n=%d: dot %g, want %g", n, got, want)
		}
	}
}

func TestRunMatchesBruteForce(t *testing.T) {
	centres := synthetic(seeded(4), 4, 40, 16, 0.8)
	p := Params{Margin: 0.7, MinSize: 5, MaxQueries: 4, Epsilon: 1, Delta: 1e-5}
	res, err := Run(centres, p, seeded(6))
	if err != nil {
		t.Fatal(err)
	}
	// Naive float64 re-implementation of Algorithm 1's selection.
	n := len(centres)
	active := make([]bool, n)
	for i := range active {
		active[i] = true
	}
	cos64 := func(a, b []float32) float64 { return cosine(a, b) }
	for q := 0; q < p.MaxQueries; q++ {
		bestSize := -1
		var best []int
		for i := range n {
			if !active[i] {
				continue
			}
			var s []int
			for j := range n {
				if active[j] && math.Acos(math.Min(1, cos64(centres[i], centres[j]))) <= p.Margin {
					s = append(s, j)
				}
			}
			if len(s) > bestSize {
				bestSize, best = len(s), s
			}
		}
		if bestSize < p.MinSize {
			if q != len(res.Clusters) {
				t.Fatalf("brute force stops after %d queries, Run after %d", q, len(res.Clusters))
			}
			return
		}
		if q >= len(res.Clusters) || res.Clusters[q].Size != bestSize {
			t.Fatalf("query %d: brute-force size %d, Run %+v", q, bestSize, res.Clusters)
		}
		mean := make([]float32, len(centres[0]))
		for _, j := range best {
			for k, v := range centres[j] {
				mean[k] += v
			}
		}
		if c := cosine(mean, res.Clusters[q].Exact); c < 1-1e-5 {
			t.Fatalf("query %d: exact centre differs (cos %g)", q, c)
		}
		removed := 0
		for i := range n {
			if active[i] && cos64(centres[i], mean) >= math.Cos(p.Margin) {
				active[i] = false
				removed++
			}
		}
		if removed != res.Clusters[q].Removed {
			t.Fatalf("query %d: removed %d, Run removed %d", q, removed, res.Clusters[q].Removed)
		}
	}
}

func TestRunCostAndEvents(t *testing.T) {
	centres := synthetic(seeded(7), 2, 30, 8, 0.5)
	p := Params{Margin: 1, MinSize: 10, MaxQueries: 3, Epsilon: 0.5, Delta: 1e-6}
	res, err := Run(centres, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epsilon != 1.5 || math.Abs(res.Delta-3e-6) > 1e-18 {
		t.Errorf("cost (%g, %g), want (Qε, Qδ) = (1.5, 3e-6)", res.Epsilon, res.Delta)
	}
	a, _ := dp.NewAccountant(nil)
	if err := a.Add(res.Events...); err != nil {
		t.Fatal(err)
	}
	eps, _, _ := a.Epsilon(3e-6)
	if eps <= 0 || eps > 10 {
		t.Errorf("accountant ε for the releases: %g", eps)
	}
	if res.Events[0].NoiseMultiplier != math.Sqrt(2*math.Log(1.25/1e-6))/0.5 || res.Events[0].Count != 3 {
		t.Errorf("event %+v", res.Events[0])
	}
}

func TestRunRejects(t *testing.T) {
	good := Params{Margin: 1, MinSize: 1, MaxQueries: 1, Epsilon: 1, Delta: 1e-5}
	for _, p := range []Params{
		{Margin: 0, MinSize: 1, MaxQueries: 1, Epsilon: 1, Delta: 1e-5},
		{Margin: 4, MinSize: 1, MaxQueries: 1, Epsilon: 1, Delta: 1e-5},
		{Margin: 1, MinSize: 0, MaxQueries: 1, Epsilon: 1, Delta: 1e-5},
		{Margin: 1, MinSize: 1, MaxQueries: 0, Epsilon: 1, Delta: 1e-5},
		{Margin: 1, MinSize: 1, MaxQueries: 1, Epsilon: 0, Delta: 1e-5},
		{Margin: 1, MinSize: 1, MaxQueries: 1, Epsilon: 1, Delta: 1},
		{Margin: math.NaN(), MinSize: 1, MaxQueries: 1, Epsilon: 1, Delta: 1e-5},
	} {
		if _, err := Run([][]float32{{1, 0}}, p, nil); err == nil {
			t.Errorf("params %+v accepted", p)
		}
	}
	for name, c := range map[string][][]float32{
		"empty":  nil,
		"zero":   {{0, 0}},
		"nan":    {{float32(math.NaN()), 1}},
		"ragged": {{1, 0}, {1}},
		"dim0":   {{}},
	} {
		if _, err := Run(c, good, nil); err == nil {
			t.Errorf("%s centres accepted", name)
		}
	}
}

func TestReadCentres(t *testing.T) {
	c, err := ReadCentres(strings.NewReader(`[[1, 0, 0.5], [0, 1, -2e-3]]`))
	if err != nil || len(c) != 2 || c[1][2] != float32(-2e-3) {
		t.Fatalf("ReadCentres: %v %v", c, err)
	}
	for _, bad := range []string{``, `[]`, `[[]]`, `[[1,2],[3]]`, `[["a"]]`, `{"x":1}`, `[[1e300]]`, `[[1]] [[2]]`} {
		if _, err := ReadCentres(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadCentres(%q) accepted", bad)
		}
	}
}

func FuzzReadCentres(f *testing.F) {
	for _, s := range []string{`[[1, 0, 0.5], [0, 1, -2e-3]]`, `[[1e38]]`, `[[1],[2],[3]]`, `[[]]`, `[`, `[[1,2],[3]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ReadCentres(bytes.NewReader(data))
		if err != nil {
			return
		}
		d := len(c[0])
		for _, row := range c {
			if len(row) != d {
				t.Fatal("ragged rows accepted")
			}
		}
		// Whatever parses must be safe to cluster: an error or a result, never a panic.
		_, _ = Run(c, Params{Margin: 1, MinSize: 1, MaxQueries: 2, Epsilon: 1, Delta: 1e-5}, seeded(1))
	})
}

func BenchmarkRun7000x512(b *testing.B) {
	centres := synthetic(seeded(1), 10, 700, 512, 0.9)
	p := Params{Margin: 1.3, MinSize: 512, MaxQueries: 3, Epsilon: 1, Delta: 5e-5}
	b.ResetTimer()
	for b.Loop() {
		if _, err := Run(centres, p, seeded(2)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDot512(b *testing.B) {
	x := make([]float32, 512)
	y := make([]float32, 512)
	for i := range x {
		x[i], y[i] = float32(i%5), float32(i%3)
	}
	var s float32
	for b.Loop() {
		s += dot(x, y)
	}
	_ = s
}

func BenchmarkDotScalar512(b *testing.B) {
	x := make([]float32, 512)
	y := make([]float32, 512)
	var s float32
	for b.Loop() {
		s += dotScalar(x, y)
	}
	_ = s
}

func TestNeighboursMatchesNaive(t *testing.T) {
	for _, n := range []int{1, 5, 33, 101} {
		centres := synthetic(seeded(byte(n)), 3, n, 40, 1.2)
		rows := len(centres)
		d := len(centres[0])
		w := make([]float32, 0, rows*d)
		for _, c := range centres {
			w = append(w, c...)
		}
		words := (rows + 63) / 64
		cosRho := float32(math.Cos(0.9))
		nb := neighbours(w, rows, d, cosRho, words)
		for i := range rows {
			for j := range rows {
				want := dotScalar(centres[i], centres[j]) >= cosRho
				if i > j {
					want = dotScalar(centres[j], centres[i]) >= cosRho
				}
				got := nb[i*words+j/64]&(1<<(j%64)) != 0
				if got != want && math.Abs(float64(dotScalar(centres[i], centres[j])-cosRho)) > 1e-5 {
					t.Fatalf("n=%d: pair (%d,%d): got %v, want %v", rows, i, j, got, want)
				}
			}
		}
	}
}
