package dp

import (
	"math"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// cell is a range [lo, hi] of integers (math.MinInt64/MaxInt64 for an
// open end) and its expected probability.
type cell struct {
	lo, hi int64
	p      float64
}

// gaussCells returns cells covering the integers for N_Z(0, σ²) with
// 2σ² = n2/d, with probabilities from the exact pmf (summed in float64,
// which is far more precise than a test of n samples can resolve) for
// σ ≤ 5000, and from the normal CDF with continuity correction for larger
// σ (the two differ by terms of order exp(−2π²σ²)). scale widens the
// distribution (scale = 1: the true one). Cells with fewer than 5 expected
// samples are merged towards the centre, so the outermost cells are the
// tails.
func gaussCells(n2, d uint64, scale float64, n int) []cell {
	v := float64(n2) / float64(d) / 2 * scale * scale // σ²
	sigma := math.Sqrt(v)
	var cuts []int64
	if sigma <= 12 {
		k := int64(math.Ceil(6 * sigma))
		for x := -k; x <= k+1; x++ {
			cuts = append(cuts, x)
		}
	} else {
		for k := -20; k <= 21; k++ {
			cuts = append(cuts, int64(math.Round(float64(k)*sigma/4)))
		}
	}
	var prob func(lo, hi int64) float64
	if sigma <= 5000 {
		lim := int64(40*sigma) + 10
		w := make([]float64, 2*lim+1)
		var z float64
		for x := -lim; x <= lim; x++ {
			w[x+lim] = math.Exp(-float64(x) * float64(x) / (2 * v))
			z += w[x+lim]
		}
		prob = func(lo, hi int64) float64 {
			lo, hi = max(lo, -lim), min(hi, lim)
			var p float64
			for x := lo; x <= hi; x++ {
				p += w[x+lim]
			}
			return p / z
		}
	} else {
		prob = func(lo, hi int64) float64 {
			a, b := math.Inf(-1), math.Inf(1)
			if lo != math.MinInt64 {
				a = (float64(lo) - 0.5) / sigma
			}
			if hi != math.MaxInt64 {
				b = (float64(hi) + 0.5) / sigma
			}
			if a > 0 {
				return normSF(a) - normSF(b)
			}
			return normCDF(b) - normCDF(a)
		}
	}
	cells := []cell{{lo: math.MinInt64, hi: cuts[0] - 1}}
	for i := 0; i+1 < len(cuts); i++ {
		cells = append(cells, cell{lo: cuts[i], hi: cuts[i+1] - 1})
	}
	cells = append(cells, cell{lo: cuts[len(cuts)-1], hi: math.MaxInt64})
	for i := range cells {
		cells[i].p = prob(cells[i].lo, cells[i].hi)
	}
	// Merge sparse cells towards the centre.
	for merged := true; merged; {
		merged = false
		for i := range cells {
			if cells[i].p*float64(n) >= 5 {
				continue
			}
			j := i + 1 // the neighbour towards the centre
			if cells[i].lo >= 0 {
				j = i - 1
			}
			a, b := min(i, j), max(i, j)
			cells[a] = cell{lo: cells[a].lo, hi: cells[b].hi, p: cells[a].p + cells[b].p}
			cells = append(cells[:b], cells[b+1:]...)
			merged = true
			break
		}
	}
	return cells
}

// chiSquareCells returns Pearson's statistic of samples x against cells
// and its degrees of freedom.
func chiSquareCells(x []int64, cells []cell) (stat float64, df int) {
	counts := make([]int, len(cells))
	for _, v := range x {
		i, j := 0, len(cells)-1
		for i < j { // binary search: the cell with lo ≤ v ≤ hi
			k := (i + j + 1) / 2
			if cells[k].lo <= v {
				i = k
			} else {
				j = k - 1
			}
		}
		counts[i]++
	}
	n := float64(len(x))
	for i, c := range cells {
		e := n * c.p
		stat += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
	}
	return stat, len(cells) - 1
}

// TestGaussTableExactPMF checks the table sampler against the exact
// probabilities of N_Z(0, σ²), tails included, at small, non-integer-σ²,
// moderate and DP-SGD-sized parameters; with few blocks, so that the tail
// entry carries real mass; and with every acceptance test sent to the
// math/big path. Each χ² test must also reject a 5% wider distribution,
// so it has the power to see a wrong sampler.
func TestGaussTableExactPMF(t *testing.T) {
	const slack = tableSlackBits
	tests := []struct {
		name   string
		n2, d  uint64 // 2σ² = n2/d
		blocks int
		slack  uint
		slow   bool
		n      int
	}{
		{"σ=1", 2, 1, 0, slack, false, 200000},
		{"σ=3", 18, 1, 0, slack, false, 200000},
		{"σ²=1/2", 1, 1, 0, slack, false, 200000},
		{"σ²=10/3", 20, 3, 0, slack, false, 200000},
		{"σ²=12.5", 25, 1, 0, slack, false, 200000},
		{"σ=100, blocks of 2", 20000, 1, 0, slack, false, 200000},
		{"σ²=1234567.5, blocks of 32", 2469135, 1, 0, slack, false, 200000},
		{"σ=2^28 (DP-SGD)", 1 << 57, 1, 0, slack, false, 300000},
		{"σ=2^31 (largest)", 1 << 63, 1, 0, slack, false, 200000},
		{"tail: σ=3, 2 blocks", 18, 1, 2, slack, false, 200000},
		{"tail: σ=100, 80 blocks of 2", 20000, 1, 80, slack, false, 200000},
		{"tail: σ²=1234567.5, 40 blocks", 2469135, 1, 40, slack, false, 200000},
		// A quarter of the proposal spare in the tail entry: its
		// acceptance factor ρ_T is far from 1 and must be applied.
		{"tail with slack: σ=3, 2 blocks", 18, 1, 2, 2, false, 200000},
		{"tail with slack: σ=100, 80 blocks of 2", 20000, 1, 80, 2, false, 200000},
		{"math/big path: σ=3", 18, 1, 0, slack, true, 30000},
		{"math/big path: σ=100, 80 blocks of 2", 20000, 1, 80, slack, true, 30000},
		{"math/big path: σ=100, 80 blocks of 2, slack", 20000, 1, 80, 2, true, 30000},
		{"math/big path: σ=2^28", 1 << 57, 1, 0, slack, true, 30000},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slow && testing.Short() {
				t.Skip("math/big path: slow")
			}
			tab := newGaussTable(tc.n2, tc.d, tc.blocks, tc.slack)
			tab.slow = tc.slow
			s := seeded(byte(100 + k))
			x := make([]int64, tc.n)
			for i := range x {
				x[i] = s.tableGaussian(tab)
			}
			stat, df := chiSquareCells(x, gaussCells(tc.n2, tc.d, 1, tc.n))
			if crit := chiSquareCritical(df); stat > crit {
				t.Errorf("χ² = %.1f with %d degrees of freedom, above the 0.1%% critical value %.1f", stat, df, crit)
			}
			if stat, df := chiSquareCells(x, gaussCells(tc.n2, tc.d, 1.05, tc.n)); stat <= chiSquareCritical(df) {
				t.Errorf("χ² cannot tell a 5%% wider distribution apart (%.1f, %d degrees of freedom)", stat, df)
			}
		})
	}
}

// TestGaussTableIsNotRoundedGaussian: at small σ the discrete Gaussian is
// measurably not round(N(0, σ²)) (e.g. P(0) = 0.399 against 0.383 at
// σ = 1); the samples fit the former and the test rejects the latter.
func TestGaussTableIsNotRoundedGaussian(t *testing.T) {
	const n = 200000
	for k, tc := range []struct {
		name  string
		n2, d uint64
	}{{"σ=1", 2, 1}, {"σ²=1/2", 1, 1}, {"σ=1.5", 9, 2}} {
		tab := newGaussTable(tc.n2, tc.d, 0, tableSlackBits)
		s := seeded(byte(50 + k))
		x := make([]int64, n)
		for i := range x {
			x[i] = s.tableGaussian(tab)
		}
		exact := gaussCells(tc.n2, tc.d, 1, n)
		sigma := math.Sqrt(float64(tc.n2) / float64(tc.d) / 2)
		rounded := make([]cell, len(exact))
		for i, c := range exact {
			a, b := math.Inf(-1), math.Inf(1)
			if c.lo != math.MinInt64 {
				a = (float64(c.lo) - 0.5) / sigma
			}
			if c.hi != math.MaxInt64 {
				b = (float64(c.hi) + 0.5) / sigma
			}
			rounded[i] = cell{lo: c.lo, hi: c.hi, p: normCDF(b) - normCDF(a)}
		}
		if stat, df := chiSquareCells(x, exact); stat > chiSquareCritical(df) {
			t.Errorf("%s: χ² = %.1f against the discrete Gaussian (%d degrees of freedom)", tc.name, stat, df)
		}
		if stat, df := chiSquareCells(x, rounded); stat <= chiSquareCritical(df) {
			t.Errorf("%s: the samples also fit the rounded continuous Gaussian (χ² = %.1f)", tc.name, stat)
		}
	}
}

// TestGaussTableAliasIsExact recomputes each entry's proposal probability
// from the alias table, as an exact integer over 2^63: it must equal the
// entry's weight (B·W_b for block b, the rest for the tail), and every
// acceptance factor must be at most 1 (W_b ≥ c·f(bB), tail weight ≥ c
// times its mass bound), or the output would not be the target.
func TestGaussTableAliasIsExact(t *testing.T) {
	for _, tc := range []struct{ n2, d uint64 }{{2, 1}, {1, 1}, {20, 3}, {20000, 1}, {2469135, 1}, {1 << 57, 1}, {1 << 63, 1}} {
		tab := newGaussTable(tc.n2, tc.d, 0, tableSlackBits)
		bins := uint64(1) << tab.kappa
		capacity := one63 >> tab.kappa
		got := make([]uint64, bins)
		for i := range bins {
			got[i] += tab.cut[i]
			got[tab.alias[i]] += capacity - tab.cut[i]
		}
		var total uint64
		for e := range bins {
			var want uint64
			switch {
			case e < tab.blocks:
				want = tab.weight[e] << tab.wbits
			case e == tab.blocks:
				want = tab.tailW
			}
			if got[e] != want {
				t.Errorf("2σ²=%d/%d: entry %d has alias weight %d, want %d", tc.n2, tc.d, e, got[e], want)
			}
			total += got[e]
		}
		if total != one63 {
			t.Errorf("2σ²=%d/%d: alias weights sum to %d, want 2^63", tc.n2, tc.d, total)
		}
		// ρ_b = c·f(bB)/⌈c·f(bB)⌉ is in (1 − 1/W_b, 1].
		for b := range tab.blocks {
			if w := tab.weight[b]; tab.rhi[b] > one63 || tab.rlo[b] > tab.rhi[b] || tab.rlo[b]+2 < one63-one63/w {
				t.Errorf("2σ²=%d/%d: block %d: ρ in [%d, %d]·2^−63, want within (1 − 1/%d, 1]", tc.n2, tc.d, b, tab.rlo[b], tab.rhi[b], w)
			}
		}
		if lo, hi := tab.tailRho(200); hi.Cmp(new(big.Int).Lsh(big.NewInt(1), 200)) > 0 || lo.Cmp(hi) > 0 {
			t.Errorf("2σ²=%d/%d: tail acceptance ρ_T above 1", tc.n2, tc.d)
		}
		// Blocks fill all but 2^−24 of the proposal, up to rounding.
		if tab.tailW > one63>>20 {
			t.Errorf("2σ²=%d/%d: the tail takes %d/2^63 of the proposal", tc.n2, tc.d, tab.tailW)
		}
	}
}

// TestGaussTableBracketsContainP checks the fast path's arithmetic against
// math/big: for points across the blocks of several tables, the coarse
// and the tight 63-bit brackets of the acceptance probability must contain
// the 200-bit bracket of the exact p, the tight one must be narrow, and
// the block's squeeze must lie below p.
func TestGaussTableBracketsContainP(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ n2, d uint64 }{{20000, 1}, {2469135, 1}, {1 << 57, 1}, {1 << 63, 1}, {123456789123, 7}} {
		tab := newGaussTable(tc.n2, tc.d, 0, tableSlackBits)
		bw := uint64(1) << tab.wbits
		for k := range 3000 {
			e := r.Uint64N(tab.blocks)
			if k%4 == 0 {
				e = r.Uint64N(min(tab.blocks, 64)) // where the mass is
			}
			o := r.Uint64N(bw)
			switch k % 10 {
			case 1:
				o = bw - 1
			case 2:
				o = 1
			}
			lo, hi := tab.acceptBounds(e, e*bw+o, 200)
			for name, f := range map[string]func(e, o uint64) (uint64, uint64){"coarse": tab.coarse, "tight": tab.tight} {
				plo, phi := f(e, o)
				if new(big.Int).Lsh(new(big.Int).SetUint64(plo), 137).Cmp(lo) > 0 ||
					new(big.Int).Lsh(new(big.Int).SetUint64(phi), 137).Cmp(hi) < 0 {
					t.Fatalf("2σ²=%d/%d, block %d, offset %d: %s bracket [%d, %d] misses p ∈ [%v, %v]·2^−200",
						tc.n2, tc.d, e, o, name, plo, phi, lo, hi)
				}
			}
			if new(big.Int).Lsh(new(big.Int).SetUint64(tab.sq[e]), 137).Cmp(lo) > 0 {
				t.Fatalf("2σ²=%d/%d, block %d, offset %d: the squeeze %d is above p ∈ [%v, %v]·2^−200", tc.n2, tc.d, e, o, tab.sq[e], lo, hi)
			}
			if plo, phi := tab.tight(e, o); phi-plo > 1<<18 {
				t.Errorf("2σ²=%d/%d, block %d, offset %d: tight bracket %d units wide", tc.n2, tc.d, e, o, phi-plo)
			}
		}
	}
}

// TestExpNeg63 checks the 63-bit bounds of exp(−x), x ∈ [tq, tq+1]·2^−63,
// against math/big at the ends of the table's cells and at random points.
func TestExpNeg63(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tab := expTable63()
	pts := []uint64{0, 1, 1<<55 - 1, 1 << 55, 1<<55 + 1, 1<<63 - 2, 1<<63 - 1}
	for range 2000 {
		pts = append(pts, r.Uint64N(1<<63))
	}
	den := new(big.Int).Lsh(big.NewInt(1), 63)
	for _, tq := range pts {
		lo, hi := expNeg63(tab, tq)
		blo, _ := expNegBounds(new(big.Int).SetUint64(tq+1), den, 200)
		_, bhi := expNegBounds(new(big.Int).SetUint64(tq), den, 200)
		if new(big.Int).Lsh(new(big.Int).SetUint64(lo), 137).Cmp(blo) > 0 || new(big.Int).Lsh(new(big.Int).SetUint64(hi), 137).Cmp(bhi) < 0 {
			t.Fatalf("tq = %d: [%d, %d] does not bracket exp(−tq/2^63)", tq, lo, hi)
		}
		if hi-lo > 1<<18 {
			t.Errorf("tq = %d: bracket %d units wide", tq, hi-lo)
		}
	}
}

// TestExpNegBounds checks the math/big brackets against an independent
// computation (expNegDigits' exact rational series) and against float64
// where the value has no exact reference.
func TestExpNegBounds(t *testing.T) {
	for _, c := range []struct{ num, den int64 }{{1, 1}, {1, 3}, {0, 5}, {255, 256}, {7, 1000}, {999999, 1000000}} {
		want := expNegDigits(c.num, c.den, 2) // ⌊exp(−x)·2^128⌋ as two words
		w := new(big.Int).SetUint64(want[0])
		w.Lsh(w, 64).Or(w, new(big.Int).SetUint64(want[1]))
		lo, hi := expNegBounds(big.NewInt(c.num), big.NewInt(c.den), 128)
		if c.num == 0 {
			w.Lsh(big.NewInt(1), 128) // exactly 1 (the digits say 1 − 2^−128)
		}
		if lo.Cmp(new(big.Int).Add(w, big.NewInt(1))) > 0 || hi.Cmp(w) < 0 || new(big.Int).Sub(hi, lo).Cmp(big.NewInt(1<<20)) > 0 {
			t.Errorf("exp(−%d/%d): [%v, %v]·2^−128, digits %v", c.num, c.den, lo, hi, w)
		}
	}
	for _, c := range []struct{ num, den int64 }{{5, 2}, {100, 1}, {1000, 7}, {123456789, 1000000}} {
		lo, hi := expNegBounds(big.NewInt(c.num), big.NewInt(c.den), 1100)
		l, _ := new(big.Float).SetInt(lo).Float64()
		h, _ := new(big.Float).SetInt(hi).Float64()
		want := math.Exp(-float64(c.num)/float64(c.den) + 1100*math.Ln2)
		if math.Abs(l/want-1) > 1e-13 || math.Abs(h/want-1) > 1e-13 || lo.Cmp(hi) > 0 {
			t.Errorf("exp(−%d/%d)·2^1100: [%g, %g], want %g", c.num, c.den, l, h, want)
		}
	}
	// Far beyond the precision: [0, 1].
	if lo, hi := expNegBounds(big.NewInt(1000), big.NewInt(1), 64); lo.Sign() != 0 || hi.Cmp(big.NewInt(1)) != 0 {
		t.Errorf("exp(−1000)·2^64: [%v, %v], want [0, 1]", lo, hi)
	}
}

// TestLazyBelowIsExact: U < 1/3 decided from a 63-bit prefix tied with 1/3
// must follow the further bits.
func TestLazyBelowIsExact(t *testing.T) {
	third := func(prec uint) (lo, hi *big.Int) {
		one := new(big.Int).Lsh(big.NewInt(1), prec)
		lo = new(big.Int).Quo(one, big.NewInt(3))
		return lo, new(big.Int).Add(lo, big.NewInt(1))
	}
	u := uint64(one63 / 3) // ⌊2^63/3⌋: 0.0101…01 (63 bits), tied with 1/3
	s := seeded(9)
	const n = 60000
	var below int
	for range n {
		if s.lazyBelow(u, third) {
			below++
		}
	}
	// 2^63/3 = u + 2/3: given the prefix, U < 1/3 iff its further bits
	// are below 2/3.
	if f := float64(below) / n; math.Abs(f-2.0/3) > 5*math.Sqrt(2.0/9/n) {
		t.Errorf("P(U < 1/3 | tied prefix) = %.4f, want 2/3", f)
	}
	if !s.lazyBelow(u-1, third) || s.lazyBelow(u+1, third) {
		t.Error("an untied prefix decided wrongly")
	}
}

// TestTableSamplerWordBudget: a proposal's fields fit one 64-bit word for
// every parameter a Grid can produce (σ_Z ≤ 2^31).
func TestTableSamplerWordBudget(t *testing.T) {
	for _, sigma := range []uint64{1, 2, 3, 1000, 1 << 20, 1<<31 - 1, 1 << 31} {
		tab := newGaussTable(2*sigma*sigma, 1, 0, tableSlackBits)
		if used := tab.kappa + 1 + 12 + tab.wbits + 16; used > 64 {
			t.Errorf("σ = %d: a proposal uses %d bits", sigma, used)
		}
		if L := tab.blocks << tab.wbits; bits.Len64(L) > 40 {
			t.Errorf("σ = %d: L = %d", sigma, L)
		}
	}
}

// TestExpSeriesBracketsAtLowPrecision checks expSeries' own error bound
// where it matters: at g = 16..40 bits (expNegBounds calls it with 64
// guard bits, which would hide a bound that is too small) its bracket must
// contain ⌊exp(−r/den)·2^128⌋·2^(g−128) from expNegDigits' exact series.
func TestExpSeriesBracketsAtLowPrecision(t *testing.T) {
	for _, c := range []struct{ num, den int64 }{{1, 1}, {1, 3}, {2, 3}, {255, 256}, {7, 1000}, {999999, 1000000}, {12345, 65536}} {
		d := expNegDigits(c.num, c.den, 2)
		w := new(big.Int).SetUint64(d[0])
		w.Lsh(w, 64).Or(w, new(big.Int).SetUint64(d[1])) // ⌊exp(−x)·2^128⌋
		for g := uint(16); g <= 40; g++ {
			lo, hi := expSeries(big.NewInt(c.num), big.NewInt(c.den), g)
			// lo·2^(128−g) ≤ exp(−x)·2^128 ≤ hi·2^(128−g).
			if new(big.Int).Lsh(lo, 128-g).Cmp(w) > 0 || new(big.Int).Lsh(hi, 128-g).Cmp(w) <= 0 {
				t.Errorf("exp(−%d/%d) at %d bits: [%v, %v] does not bracket %v·2^−128", c.num, c.den, g, lo, hi, w)
			}
		}
	}
}

// TestGridSensitivityWitness plays the adversary against the rounding
// terms of Grid's accounting: neighbours v, v' with |v_i − v'_i| just
// above γ on every coordinate snap 2 grid steps apart per coordinate
// (0.5γ − ε rounds to 0, 1.5γ + ε to 2), so the integer sensitivity
// reaches Δ/γ + Dim in L1 and Δ/γ + √Dim in L2 (both bounds tight). The charged ε
// (LaplaceEpsilon) and multiplier (GaussianMultiplier) must cover the
// integer distance the attacker actually produced.
func TestGridSensitivityWitness(t *testing.T) {
	const dim = 16
	g := Grid{Gamma: 0.5, Scale: 1000, Dim: dim}
	tiny := 1e-6
	var l1Real, l1Int, l2RealSq, l2IntSq float64
	for range dim {
		v, w := (0.5-tiny)*g.Gamma, (1.5+tiny)*g.Gamma
		k := float64(snap(w, g.Gamma) - snap(v, g.Gamma))
		l1Real += w - v
		l1Int += math.Abs(k)
		l2RealSq += (w - v) * (w - v)
		l2IntSq += k * k
	}
	if l1Int != 2*dim {
		t.Fatalf("the witness moves %g grid steps in L1, want %d", l1Int, 2*dim)
	}
	eps, err := g.LaplaceEpsilon(l1Real)
	if err != nil {
		t.Fatal(err)
	}
	// The discrete Laplace release of scale Scale is (l1Int/Scale)-DP
	// for this pair, and no better.
	if want := l1Int / float64(g.Scale); eps < want {
		t.Errorf("LaplaceEpsilon(%g) = %g, below the %g the witness pair costs", l1Real, eps, want)
	}
	m, err := g.GaussianMultiplier(math.Sqrt(l2RealSq))
	if err != nil {
		t.Fatal(err)
	}
	// The pair costs multiplier Scale/‖k‖₂; the charged one must not be larger.
	if have := float64(g.Scale) / math.Sqrt(l2IntSq); m > have {
		t.Errorf("GaussianMultiplier(%g) = %g, above the %g the witness pair allows", math.Sqrt(l2RealSq), m, have)
	}
}
