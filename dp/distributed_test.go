package dp

import (
	"math"
	"testing"
)

// logSumExp returns log Σ exp(v).
func logSumExp(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	if math.IsInf(m, -1) {
		return m
	}
	var s float64
	for _, x := range v {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// sumPMF returns log P(Z = x) for x ∈ [−L, L] (index x + L), Z the sum
// of n independent N_Z(0, σ²), by exact convolution in log space of the
// truncated pmfs (the truncated mass is below exp(−L²/(2nσ²)), far
// beneath float64 resolution for the L used).
func sumPMF(sigma float64, n, L int) []float64 {
	one := make([]float64, 2*L+1)
	for x := -L; x <= L; x++ {
		one[x+L] = -float64(x*x) / (2 * sigma * sigma)
	}
	z := logSumExp(one)
	for i := range one {
		one[i] -= z
	}
	cur := one
	for range n - 1 {
		next := make([]float64, 2*L+1)
		terms := make([]float64, 0, 2*L+1)
		for x := -L; x <= L; x++ {
			terms = terms[:0]
			for y := -L; y <= L; y++ {
				if u := x - y; u >= -L && u <= L {
					terms = append(terms, cur[y+L]+one[u+L])
				}
			}
			next[x+L] = logSumExp(terms)
		}
		cur = next
	}
	return cur
}

// exactRDP returns D_α(Z ‖ Z + Δ) for one coordinate by direct summation:
// (1/(α−1)) log Σ_x P(x)^α P(x−Δ)^(1−α).
func exactRDP(logp []float64, L, delta int, alpha float64) float64 {
	var terms []float64
	for x := -L + abs(delta); x <= L-abs(delta); x++ {
		terms = append(terms, alpha*logp[x+L]+(1-alpha)*logp[x-delta+L])
	}
	return logSumExp(terms) / (alpha - 1)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestDistributedDGUpperBoundsExactRDP evaluates the Rényi divergence of
// the sum's exact distribution numerically, for small parameters where τ
// matters, and checks that Proposition 14's bound is above it everywhere
// (in one dimension and, by additivity over independent coordinates, in
// three).
func TestDistributedDGUpperBoundsExactRDP(t *testing.T) {
	const L = 120
	for _, n := range []int{1, 2, 3, 5} {
		for _, sigma := range []float64{0.5, 0.6, 0.8, 1, 1.5, 2} {
			logp := sumPMF(sigma, n, L)
			for _, alpha := range []float64{1.5, 2, 4, 8, 16} {
				// One dimension.
				for _, d := range []int{1, 2, 3} {
					m := DistributedDiscreteGaussian{Sigma: sigma, Clients: n, L2: float64(d), L1: float64(d), Dim: 1}
					b, err := m.RDP(alpha)
					if err != nil {
						t.Fatal(err)
					}
					for _, sign := range []int{1, -1} {
						ex := exactRDP(logp, L, sign*d, alpha)
						if ex > b*(1+1e-9) {
							t.Fatalf("n=%d σ=%g α=%g Δ=%d: exact RDP %.6g above the bound %.6g", n, sigma, alpha, sign*d, ex, b)
						}
					}
				}
				// Three dimensions, Δ = (1, −1, 2).
				ex := exactRDP(logp, L, 1, alpha) + exactRDP(logp, L, -1, alpha) + exactRDP(logp, L, 2, alpha)
				m := DistributedDiscreteGaussian{Sigma: sigma, Clients: n, L2: math.Sqrt(6), L1: 4, Dim: 3}
				b, _ := m.RDP(alpha)
				if ex > b*(1+1e-9) {
					t.Fatalf("n=%d σ=%g α=%g, d=3: exact RDP %.6g above the bound %.6g", n, sigma, alpha, ex, b)
				}
			}
		}
	}
}

// TestDistributedDGContinuousLimit: for σ large enough that τ is
// negligible, the bound, the exact RDP of the sum and the continuous
// Gaussian's α‖Δ‖²/(2nσ²) agree.
func TestDistributedDGContinuousLimit(t *testing.T) {
	const L = 200
	for _, tc := range []struct {
		sigma float64
		n     int
	}{{3, 2}, {4, 4}, {6, 3}} {
		logp := sumPMF(tc.sigma, tc.n, L)
		for _, alpha := range []float64{2, 8, 32} {
			m := DistributedDiscreteGaussian{Sigma: tc.sigma, Clients: tc.n, L2: 2, L1: 2, Dim: 1}
			b, _ := m.RDP(alpha)
			cont := alpha * 4 / (2 * float64(tc.n) * tc.sigma * tc.sigma)
			ex := exactRDP(logp, L, 2, alpha)
			if math.Abs(b-cont) > 1e-9*cont || math.Abs(ex-cont) > 1e-6*cont {
				t.Fatalf("σ=%g n=%d α=%g: bound %.9g, exact %.9g, continuous %.9g", tc.sigma, tc.n, alpha, b, ex, cont)
			}
		}
	}
	// n = 1 is exactly the single discrete Gaussian (τ = 0).
	m := DistributedDiscreteGaussian{Sigma: 0.7, Clients: 1, L2: 1, Dim: 1}
	if m.Tau() != 0 {
		t.Fatal("τ ≠ 0 for one client")
	}
}

// TestDistributedDGEpsilonMatchesExact compares the accountant's ε for
// several rounds with the ε obtained, by the same conversion, from the RDP
// curve of the exact distribution computed numerically: the accountant's
// must be at least the exact one and, where τ is small, within 0.1%.
func TestDistributedDGEpsilonMatchesExact(t *testing.T) {
	const L = 200
	orders := []float64{1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}
	for _, tc := range []struct {
		sigma  float64
		n      int
		rounds int
		tight  bool
	}{{0.5, 3, 1, false}, {1, 4, 10, false}, {2, 5, 20, true}, {3, 8, 100, true}} {
		m := DistributedDiscreteGaussian{Sigma: tc.sigma, Clients: tc.n, L2: 1, L1: 1, Dim: 1}
		eps, _, err := m.Epsilon(orders, tc.rounds, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		logp := sumPMF(tc.sigma, tc.n, L)
		rdp := make([]float64, len(orders))
		for i, a := range orders {
			rdp[i] = float64(tc.rounds) * math.Max(exactRDP(logp, L, 1, a), exactRDP(logp, L, -1, a))
		}
		exact, _, err := RDPToDP(orders, rdp, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if eps < exact*(1-1e-12) {
			t.Fatalf("σ=%g n=%d: accountant ε %.6g below the exact mechanism's %.6g", tc.sigma, tc.n, eps, exact)
		}
		if tc.tight && eps > exact*1.001 {
			t.Fatalf("σ=%g n=%d: accountant ε %.6g more than 0.1%% above the exact %.6g", tc.sigma, tc.n, eps, exact)
		}
		t.Logf("σ=%g n=%d rounds=%d: ε = %.5g (exact distribution: %.5g)", tc.sigma, tc.n, tc.rounds, eps, exact)
	}
	// The event charges the same curve as Epsilon.
	m := DistributedDiscreteGaussian{Sigma: 2, Clients: 5, L2: 1, Dim: 1}
	e, err := m.Event(orders, 20, "distributed DG")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := NewAccountant(orders)
	if err := a.Add(e); err != nil {
		t.Fatal(err)
	}
	ea, _, _ := a.Epsilon(1e-5)
	em, _, _ := m.Epsilon(orders, 20, 1e-5)
	if math.Abs(ea-em) > 1e-12*em {
		t.Fatalf("accountant %.12g, direct %.12g", ea, em)
	}
}

func TestDistributedDGValidate(t *testing.T) {
	for _, m := range []DistributedDiscreteGaussian{
		{Sigma: 0.49, Clients: 2, L2: 1, Dim: 1},
		{Sigma: math.NaN(), Clients: 2, L2: 1, Dim: 1},
		{Sigma: 1, Clients: 0, L2: 1, Dim: 1},
		{Sigma: 1, Clients: 2, L2: -1, Dim: 1},
		{Sigma: 1, Clients: 2, L2: 1, Dim: 0},
	} {
		if _, err := m.RDP(2); err == nil {
			t.Fatalf("%+v accepted", m)
		}
	}
}

// TestDiscreteGaussianInts checks the integer sampler against the exact
// pmf by χ² (short vectors use CKS's sampler, long ones the table), with
// the power to reject a 5% wider distribution.
func TestDiscreteGaussianInts(t *testing.T) {
	for k, tc := range []struct {
		sigma uint64
		chunk int
	}{{1, 10}, {3, 100}, {3, 5000}, {40, 5000}} {
		s := seeded(byte(200 + k))
		const n = 200000
		x := make([]int64, 0, n)
		buf := make([]int64, tc.chunk)
		for len(x) < n {
			if err := s.DiscreteGaussianInts(buf, tc.sigma); err != nil {
				t.Fatal(err)
			}
			x = append(x, buf...)
		}
		n2 := 2 * tc.sigma * tc.sigma
		stat, df := chiSquareCells(x, gaussCells(n2, 1, 1, len(x)))
		if crit := chiSquareCritical(df); stat > crit {
			t.Errorf("σ=%d chunk %d: χ² = %.1f, %d df, above %.1f", tc.sigma, tc.chunk, stat, df, crit)
		}
		if stat, df := chiSquareCells(x, gaussCells(n2, 1, 1.05, len(x))); stat <= chiSquareCritical(df) {
			t.Errorf("σ=%d: χ² cannot tell a 5%% wider distribution apart", tc.sigma)
		}
	}
	if err := seeded(1).DiscreteGaussianInts(make([]int64, 3), 0); err == nil {
		t.Fatal("σ = 0 accepted")
	}
}
