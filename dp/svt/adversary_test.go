package svt

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

// This file plays a distinguishing attack on the selection step of Irene's
// Algorithm 3 (one AboveThreshold run, γ₄ = 1) and shows the attack fails
// against Veil's implementation but succeeds against the same code run with its
// comparison noise halved.
//
// The attack. Neighbouring gradients differ by at most Δ in every
// coordinate. The worst case of the proof of Lyu et al. (Theorem 2) is k
// coordinates that are below the threshold in D and Δ higher in D', and one
// coordinate that is Δ above in D and Δ lower in D':
//
//	D  = (0, 0, 0, Δ),   D' = (Δ, Δ, Δ, 0).
//
// The adversary sees the release (which coordinate was selected) and, to be
// stronger than a real one, how many coordinates were examined (the
// position of the selected one in the random order, which is independent
// of the data, so the guarantee must hold given it). Every outcome o of
// this pair is an event; the attack wins if for some o it can show
// ln(P_D(o)/P_D'(o)) > ε (or the same with D and D' exchanged) at
// confidence 1 − 10^−6 over all events together.
//
// Statistics. Each probability is bounded by the Chernoff–KL bound for a
// binomial count (P(p̂ ≥ x | p) ≤ exp(−n·KL(x‖p)) and the mirror), so
// the bounds hold for any n, not only asymptotically; the 10^−6 is split
// over the 2·|outcomes| comparisons (Bonferroni). A correct mechanism
// therefore fails this test with probability at most 10^−6 (here the seed
// is fixed, so the test is deterministic).
//
// Power. With Δ equal to the threshold noise scale b_t and the threshold
// at T = b_t/4, numerical integration of the continuous mechanism gives,
// for the outcome "the last coordinate is selected after three below":
// loss 1.452 for Irene's scales (comparison noise b_q = 2b_t; claim
// Δ/b_t + 2Δ/b_q = 2) and 2.487 when b_q is halved (then the proven
// figure would be 3, but the charge stays 2), with probabilities 0.032 and
// 0.0027 (the 1/4 of the order included) in the halved case. At 300,000
// runs per input the attack separates the halved variant from ε = 2 by
// about 13 standard errors and stays about 0.5 below ε on the real one.

// adversaryRuns is the number of runs per input.
const adversaryRuns = 300_000

// selectionMechanism runs one selection on tmp and returns the selected
// coordinate (−1 for none) and the number of coordinates examined.
type selectionMechanism func(tmp []float64, src *dp.Source) (selected, examined int)

// outcomeCounts runs m on tmp n times.
func outcomeCounts(m selectionMechanism, tmp []float64, n int, src *dp.Source) map[[2]int]int {
	c := map[[2]int]int{}
	for range n {
		s, e := m(tmp, src)
		c[[2]int{s, e}]++
	}
	return c
}

// klBernoulli is KL(x‖p) for Bernoulli distributions.
func klBernoulli(x, p float64) float64 {
	term := func(a, b float64) float64 {
		if a == 0 {
			return 0
		}
		return a * math.Log(a/b)
	}
	return term(x, p) + term(1-x, 1-p)
}

// binomialBounds returns [lo, hi] with P(p < lo) and P(p > hi) each at
// most alpha given k successes in n trials (Chernoff–KL, by bisection).
func binomialBounds(k, n int, alpha float64) (lo, hi float64) {
	x := float64(k) / float64(n)
	r := math.Log(1/alpha) / float64(n)
	lo, hi = 0, x
	if k > 0 {
		a, b := 0.0, x
		for range 100 {
			m := (a + b) / 2
			if klBernoulli(x, m) > r {
				a = m
			} else {
				b = m
			}
		}
		lo = a
	}
	a, b := x, 1.0
	for range 100 {
		m := (a + b) / 2
		if klBernoulli(x, m) > r {
			b = m
		} else {
			a = m
		}
	}
	hi = b
	return lo, hi
}

// attack returns the largest lower confidence bound, over all outcomes and
// both directions, of the privacy loss ln(P_D(o)/P_D'(o)), with the point
// estimate of that outcome's loss.
func attack(m selectionMechanism, d, d2 []float64, seed byte) (bound, estimate float64) {
	ca := outcomeCounts(m, d, adversaryRuns, seeded(seed))
	cb := outcomeCounts(m, d2, adversaryRuns, seeded(seed+1))
	keys := map[[2]int]bool{}
	for k := range ca {
		keys[k] = true
	}
	for k := range cb {
		keys[k] = true
	}
	alpha := 1e-6 / float64(2*len(keys))
	bound = math.Inf(-1)
	for k := range keys {
		na, nb := ca[k], cb[k]
		la, ha := binomialBounds(na, adversaryRuns, alpha)
		lb, hb := binomialBounds(nb, adversaryRuns, alpha)
		for _, c := range []struct{ lo, est float64 }{
			{math.Log(la / hb), math.Log(float64(na) / float64(nb))},
			{math.Log(lb / ha), math.Log(float64(nb) / float64(na))},
		} {
			if c.lo > bound {
				bound, estimate = c.lo, c.est
			}
		}
	}
	return bound, estimate
}

// weakenedIrene is Irene's selection with its comparison noise scale
// multiplied by compareFactor.
func weakenedIrene(p IreneParams, tmp []float64, src *dp.Source, compareFactor float64) IreneResult {
	s, err := IreneScales(p)
	if err != nil {
		panic(err)
	}
	s.Compare *= compareFactor
	return irene(p, s, tmp, src)
}

// adversaryParams gives threshold noise b_t = Δ = 1 (σ(ε₁) = 1 needs
// ε₁ = √(32·ln 4), so ε = ε₁·√513/√512) and T = b_t/4; the clip is far
// from the queries.
func adversaryParams() IreneParams {
	return IreneParams{Epsilon: math.Sqrt(32*math.Log(4)) * math.Sqrt(513) / math.Sqrt(512), Delta: 0.5,
		Clip: 100, Threshold: 0.25, MaxCount: 1, Sensitivity: 1}
}

func TestIreneSelectionResistsDistinguishingAttack(t *testing.T) {
	p := adversaryParams()
	s, err := IreneScales(p)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(s.Threshold-1) > 1e-12 {
		t.Fatalf("threshold noise scale %g, want 1", s.Threshold)
	}
	// The selection's claimed ε (one AboveThreshold run, as IreneCost
	// charges it): Δ/b_t + 2Δ/b_q = 1 + 1 = 2.
	eps := p.Sensitivity/s.Threshold + 2*p.Sensitivity/s.Compare
	d, d2 := []float64{0, 0, 0, 1}, []float64{1, 1, 1, 0}
	mechanism := func(factor float64) selectionMechanism {
		return func(tmp []float64, src *dp.Source) (int, int) {
			var r IreneResult
			if factor == 1 {
				var err error
				if r, err = Irene(p, tmp, src); err != nil {
					t.Fatal(err)
				}
			} else {
				r = weakenedIrene(p, tmp, src, factor)
			}
			if len(r.Selected) == 0 {
				return -1, r.Examined
			}
			return r.Selected[0], r.Examined
		}
	}
	bound, est := attack(mechanism(1), d, d2, 60)
	t.Logf("Irene: loss at least %.3f (confidence 1−10⁻⁶; estimate %.3f), claim ε = %.3f", bound, est, eps)
	if bound > eps {
		t.Errorf("the attack shows a privacy loss of at least %.3f > ε = %.3f", bound, eps)
	}
	// The attack is not toothless on the real mechanism: it measures a loss
	// near the 1.452 that integration predicts.
	if math.Abs(est-1.452) > 0.1 {
		t.Errorf("estimated loss %.3f; integration predicts 1.452 for this outcome", est)
	}
	bound, est = attack(mechanism(0.5), d, d2, 70)
	t.Logf("halved comparison noise: loss at least %.3f (estimate %.3f)", bound, est)
	if bound <= eps {
		t.Errorf("the attack missed the variant with half the comparison noise: loss bound %.3f ≤ ε = %.3f", bound, eps)
	}
}

// TestSparseResistsDistinguishingAttack plays the same attack on the
// standard sparse vector (Lyu et al. Algorithm 1, c = 1, ε = 2, Δ = 1,
// T = 1/4) with five queries in a fixed order, D = (0, 0, 0, 0, 1) and
// D' = (1, 1, 1, 1, 0). The queries move in opposite directions, so they
// are not monotonic; declaring them monotonic (Monotonic: true) halves the
// comparison noise relative to the budget (cΔ/ε₂ with an even split
// instead of 2cΔ/ε₂), and the run is then only (1.5ε)-DP. Integration of
// the continuous mechanisms for the outcome "the fifth query is the first
// above": loss 1.776 with the right noise, 2.692 with the monotonic
// noise, with probabilities 0.094 and 0.0064 in the latter case.
func TestSparseResistsDistinguishingAttack(t *testing.T) {
	const eps = 2.0
	mechanism := func(monotonic bool) selectionMechanism {
		p := SparseParams{Epsilon: eps, Sensitivity: 1, Threshold: 0.25, MaxCount: 1, Monotonic: monotonic}
		return func(q []float64, src *dp.Source) (int, int) {
			s, err := NewSparse(p, src)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range q {
				up, err := s.Query(v)
				if err != nil {
					t.Fatal(err)
				}
				if up {
					return i, 0
				}
			}
			return -1, 0
		}
	}
	d, d2 := []float64{0, 0, 0, 0, 1}, []float64{1, 1, 1, 1, 0}
	bound, est := attack(mechanism(false), d, d2, 80)
	t.Logf("sparse vector: loss at least %.3f (estimate %.3f), claim ε = %g", bound, est, eps)
	if bound > eps {
		t.Errorf("the attack shows a privacy loss of at least %.3f > ε = %g", bound, eps)
	}
	if math.Abs(est-1.776) > 0.1 {
		t.Errorf("estimated loss %.3f; integration predicts 1.776 for this outcome", est)
	}
	bound, est = attack(mechanism(true), d, d2, 90)
	t.Logf("non-monotonic queries declared monotonic: loss at least %.3f (estimate %.3f)", bound, est)
	if bound <= eps {
		t.Errorf("the attack missed the halved comparison noise of a false Monotonic: loss bound %.3f ≤ ε = %g", bound, eps)
	}
}
