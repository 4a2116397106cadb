package pate

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

func TestQBoundTheorem4(t *testing.T) {
	// votes (10, 8, 3), γ = 0.5: 3/(4e) + 5.5/(4e^3.5) = 0.3174310.
	q, err := QBound([]float64{10, 8, 3}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(q-0.3174310) > 1e-7 {
		t.Errorf("QBound = %.7f, want 0.3174310", q)
	}
	// The plurality need not be first.
	q2, _ := QBound([]float64{3, 8, 10}, 0.5)
	if q2 != q {
		t.Errorf("order-dependent bound: %g vs %g", q2, q)
	}
	// Empirically, the noisy arg max differs from j* at most that often.
	for _, tc := range []struct {
		votes []float64
		gamma float64
	}{{[]float64{10, 8, 3}, 0.5}, {[]float64{30, 5, 5, 10}, 0.1}, {[]float64{50, 0}, 0.05}} {
		bound, _ := QBound(tc.votes, tc.gamma)
		src := seeded(1)
		const n = 40000
		miss := 0
		for range n {
			j, _ := NoisyArgmax(tc.votes, tc.gamma, src)
			if j != 0 {
				miss++
			}
		}
		p := float64(miss) / n
		if p > bound+4*math.Sqrt(bound*(1-bound)/n) {
			t.Errorf("%v: empirical P[≠ j*] = %.4f above Theorem 4 bound %.4f", tc, p, bound)
		}
	}
}

func TestNoisyArgmaxNoiseScale(t *testing.T) {
	// Two classes with equal votes: P[class 0] = 1/2; with a gap g the
	// probability the runner-up wins is P[Lap(1/γ) − Lap(1/γ) > g]
	// = (2 + γg)/(4e^{γg}) exactly, so Theorem 4 is tight for 2 classes.
	const n = 100000
	gamma, g := 0.4, 3.0
	src := seeded(2)
	miss := 0
	for range n {
		if j, _ := NoisyArgmax([]float64{g, 0}, gamma, src); j != 0 {
			miss++
		}
	}
	want := (2 + gamma*g) / (4 * math.Exp(gamma*g))
	if p := float64(miss) / n; math.Abs(p-want) > 4*math.Sqrt(want*(1-want)/n) {
		t.Errorf("P[runner-up wins] = %.4f, want %.4f for Lap(1/γ)", p, want)
	}
}

func TestMoments(t *testing.T) {
	// Theorem 3 at γ = 0.1, q = 0.05, l = 2 (hand value 0.0460479).
	if got := DataDependentMoment(0.1, 0.05, 2); math.Abs(got-0.0460479) > 1e-7 {
		t.Errorf("Theorem 3 moment = %.7f, want 0.0460479", got)
	}
	// Theorem 2: 2γ²l(l+1).
	if got := DataIndependentMoment(0.1, 2); math.Abs(got-0.12) > 1e-15 {
		t.Errorf("Theorem 2 moment = %g, want 0.12", got)
	}
	// Condition q < (e^{2γ}−1)/(e^{4γ}−1) = 0.450166 at γ = 0.1.
	if got := DataDependentMoment(0.1, 0.46, 2); got != DataIndependentMoment(0.1, 2) {
		t.Errorf("q above the condition: %g, want the data-independent bound", got)
	}
	// Near the condition the data-dependent bound is looser and the
	// minimum falls back; well below it, it is tighter.
	if got := DataDependentMoment(0.1, 0.44, 2); got != DataIndependentMoment(0.1, 2) {
		t.Errorf("q = 0.44: %g, want the smaller data-independent bound", got)
	}
	if got := DataDependentMoment(0.1, 0.1, 2); got >= DataIndependentMoment(0.1, 2) {
		t.Errorf("q = 0.1 should be tighter: %g", got)
	}
	// q = 0: perfect consensus costs nothing.
	if got := DataDependentMoment(0.1, 0, 3); math.Abs(got) > 1e-15 {
		t.Errorf("q = 0 moment = %g", got)
	}
}

func TestAnalyze(t *testing.T) {
	// Strong composition: T = 100, γ = 0.05, δ = 1e-5 → 5.7985259.
	hists := make([][]float64, 100)
	for i := range hists {
		hists[i] = []float64{45, 3, 2}
	}
	s, err := Analyze(hists, 0.05, 1e-5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(s.StrongCompositionEpsilon-5.7985259) > 1e-6 {
		t.Errorf("strong composition ε = %.7f, want 5.7985259", s.StrongCompositionEpsilon)
	}
	// With γ = 0.2 the 45-vote consensus is strong (q ≈ 1e-3).
	a, err := Analyze(hists, 0.2, 1e-5, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Moments accountant by hand for the data-independent bound.
	best := math.Inf(1)
	for l := 1.0; l <= 64; l++ {
		best = math.Min(best, (100*DataIndependentMoment(0.2, l)+math.Log(1e5))/l)
	}
	if math.Abs(a.DataIndependentEpsilon-best) > 1e-12 {
		t.Errorf("data-independent ε = %g, want %g", a.DataIndependentEpsilon, best)
	}
	if !(a.Epsilon < a.DataIndependentEpsilon && a.DataIndependentEpsilon < a.StrongCompositionEpsilon) {
		t.Errorf("strong consensus should be cheapest: %+v", a)
	}
	// Contested votes cost (almost) the data-independent amount.
	contested := make([][]float64, 100)
	for i := range contested {
		contested[i] = []float64{17, 16, 17}
	}
	c, _ := Analyze(contested, 0.2, 1e-5, nil)
	if math.Abs(c.Epsilon-c.DataIndependentEpsilon) > 1e-9 {
		t.Errorf("contested votes: ε %g, data-independent %g", c.Epsilon, c.DataIndependentEpsilon)
	}
	// The RDP curve charged to an accountant is never above the moments ε.
	acct, _ := dp.NewAccountant(nil)
	if err := acct.Add(a.Event); err != nil {
		t.Fatal(err)
	}
	e, _, _ := acct.Epsilon(1e-5)
	if e > a.Epsilon+1e-9 {
		t.Errorf("accountant ε %g above moments ε %g", e, a.Epsilon)
	}
}

func TestAnalyzeRejects(t *testing.T) {
	h := [][]float64{{1, 2}}
	if _, err := Analyze(h, 0, 1e-5, nil); err == nil {
		t.Error("γ = 0 accepted")
	}
	if _, err := Analyze(h, 0.1, 1, nil); err == nil {
		t.Error("δ = 1 accepted")
	}
	if _, err := Analyze(nil, 0.1, 1e-5, nil); err == nil {
		t.Error("no histograms accepted")
	}
	if _, err := Analyze([][]float64{{1}}, 0.1, 1e-5, nil); err == nil {
		t.Error("one-class histogram accepted")
	}
	if _, err := Analyze([][]float64{{1, -1}}, 0.1, 1e-5, nil); err == nil {
		t.Error("negative votes accepted")
	}
	if _, err := Analyze(h, 0.1, 1e-5, []float64{2, 1}); err == nil {
		t.Error("descending moments accepted")
	}
	if _, err := NoisyArgmax([]float64{1, math.NaN()}, 0.1, nil); err == nil {
		t.Error("NaN votes accepted")
	}
}

func TestReadHistograms(t *testing.T) {
	h, err := ReadHistograms(strings.NewReader(`[[48, 1, 1], [20, 25]]`))
	if err != nil || len(h) != 2 || h[1][1] != 25 {
		t.Fatalf("%v %v", h, err)
	}
	for _, bad := range []string{``, `[]`, `[[1]]`, `[[1,-2]]`, `[["x",1]]`, `{}`, `[[1,2]] 3`} {
		if _, err := ReadHistograms(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadHistograms(%q) accepted", bad)
		}
	}
}

func FuzzReadHistograms(f *testing.F) {
	for _, s := range []string{`[[48, 1, 1], [20, 25]]`, `[[0,0]]`, `[[1e308, 1e308]]`, `[[1]]`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ReadHistograms(bytes.NewReader(data))
		if err != nil {
			return
		}
		if _, err := Analyze(h, 0.1, 1e-5, nil); err != nil {
			t.Fatalf("parsed histograms rejected by Analyze: %v", err)
		}
	})
}

// TestNoisyArgmaxAdversary plays the adversary against one noisy-vote
// answer: one teacher switches its vote from class 0 to class 1, turning
// the histogram (2, 0) into (1, 1), and the attacker guesses which
// histogram was used from the released label. Each answer is 2γ-DP
// (LightFace Theorem 2), so for every label j the attacker's likelihood
// ratio P[j | (2,0)] / P[j | (1,1)] and its inverse must be at most e^{2γ}
// (tested with 4-standard-error slack). At γ = 0.7 the true worst ratio
// is 2.39 against the bound 4.06; noise of half the scale, Lap(1/(2γ)),
// would give 6.86 and fail.
func TestNoisyArgmaxAdversary(t *testing.T) {
	const n = 100000
	const gamma = 0.7
	var counts [2][2]float64 // [histogram][label]
	src := seeded(7)
	for h, votes := range [][]float64{{2, 0}, {1, 1}} {
		for range n {
			j, err := NoisyArgmax(votes, gamma, src)
			if err != nil {
				t.Fatal(err)
			}
			counts[h][j]++
		}
	}
	bound := math.Exp(2 * gamma)
	for j := range 2 {
		for _, hv := range [][2]int{{0, 1}, {1, 0}} {
			p, q := counts[hv[0]][j]/n, counts[hv[1]][j]/n
			sp, sq := math.Sqrt(p*(1-p)/n), math.Sqrt(q*(1-q)/n)
			// Even the attacker's most optimistic reading of the
			// estimates must stay within e^{2γ}.
			if lo, hi := p-4*sp, q+4*sq; lo > bound*hi {
				t.Errorf("label %d: P = %.4f under histogram %d but %.4f under its neighbour: ratio %.2f > e^{2γ} = %.2f",
					j, p, hv[0], q, p/q, bound)
			}
		}
	}
}

// TestMomentConditionBoundary pins the role of the 4γ term in Theorem 3's
// condition q < (e^{2γ}−1)/(e^{4γ}−1) = 1/(e^{2γ}+1) =: q*.
//
// Why q* is exactly where the bound ends: at q = q*,
// 1−q* = e^{2γ}/(e^{2γ}+1) and 1−e^{2γ}q* = 1/(e^{2γ}+1), so
// (1−q*)/(1−e^{2γ}q*) = e^{2γ} and the bound is
// log((1−q*)e^{2γl} + q*e^{2γl}) = 2γl, the trivial moment of a (2γ, 0)-DP
// answer. Below q* Theorem 3 is tighter than 2γl; above it, it is looser
// (so the minimum falls back), and from q = e^{−2γ} on, 1−e^{2γ}q ≤ 0 and
// the formula is not even defined. Hence two pins:
//
//   - just below q* the data-dependent value must be returned. At γ = 0.5,
//     l = 1 (data-independent bound min(2·0.25·2, 1) = 1, q* = 1/(e+1) =
//     0.2689414): q = 0.25 gives log(¾·3/(4−e) + e/4) = log(9/(4(4−e)) +
//     e/4) = log(1.755454 + 0.679570) = 0.8899577; q = 0.2689 gives
//     0.9997354 (same formula, computed to 30 digits with mpmath). Writing
//     e^{cγ} with c > 4 for the 4γ term moves the condition below 0.2689
//     already at c = 4.01 ((e−1)/(e^{2.005}−1) = 0.26743) and the answer
//     would become 1.
//   - between e^{−2γ} and 1 the data-independent bound must be returned,
//     never NaN. At γ = 3, l = 1 (bound min(2·9·2, 6) = 6): e^{−6} =
//     0.0024788 < q = 0.0025, and 1−e^6·0.0025 = −0.0086 < 0, while
//     q* = 0.0024726. With c < 4, e.g. c = 3.99, the condition becomes
//     (e^6−1)/(e^{11.97}−1) = 0.002549 > q and the formula's log of a
//     negative number would be returned as NaN.
func TestMomentConditionBoundary(t *testing.T) {
	tests := []struct {
		name        string
		gamma, q, l float64
		want        float64
	}{
		{"below q*, γ=0.5, q=0.25", 0.5, 0.25, 1, 0.8899577},
		{"just below q*, γ=0.5, q=0.2689", 0.5, 0.2689, 1, 0.9997354},
		{"past e^-2γ, γ=3, q=0.0025", 3, 0.0025, 1, 6},
		{"past e^-2γ, γ=1, q=0.5", 1, 0.5, 2, 4},
	}
	for _, tc := range tests {
		got := DataDependentMoment(tc.gamma, tc.q, tc.l)
		if math.IsNaN(got) || math.Abs(got-tc.want) > 1e-7 {
			t.Errorf("%s: moment %.7f, want %.7f", tc.name, got, tc.want)
		}
	}
	// The boundary itself: at q* the bound meets 2γl from below (l = 3 with
	// γ(l+1) ≥ 1, so that 2γl is also the data-independent bound).
	for _, g := range []float64{0.5, 2} {
		qs := 1 / (math.Exp(2*g) + 1)
		l := 3.0
		got := DataDependentMoment(g, qs*(1-1e-7), l)
		if got > 2*g*l || 2*g*l-got > 1e-4 {
			t.Errorf("γ=%g: moment just below q* = %g, want just under 2γl = %g", g, got, 2*g*l)
		}
	}
}

// TestNoisyLabelsDrawEachFromOneSource: NoisyLabels is NoisyArgmax on
// each histogram in turn from the same stream, and refuses a bad
// histogram.
func TestNoisyLabelsDrawEachFromOneSource(t *testing.T) {
	hists := [][]float64{{9, 1, 0}, {0, 2, 8}, {5, 5}}
	got, err := NoisyLabels(hists, 0.3, seeded(3))
	if err != nil {
		t.Fatal(err)
	}
	src := seeded(3)
	for i, h := range hists {
		want, err := NoisyArgmax(h, 0.3, src)
		if err != nil || got[i] != want {
			t.Fatalf("label %d = %d, want %d (%v)", i, got[i], want, err)
		}
	}
	if _, err := NoisyLabels([][]float64{{1}}, 0.3, nil); err == nil {
		t.Error("a one-class histogram accepted")
	}
}
