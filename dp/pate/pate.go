// Package pate implements noisy-vote aggregation (the PATE mechanism of
// Papernot et al. 2017, used by LightFace Section 4 for its ensemble
// labels) and its privacy analysis: the data-independent bound (2γ, 0) per
// answer (LightFace Theorem 2), and the data-dependent moments bound of
// LightFace Theorems 3–4, composed over all answers by the moments
// accountant into (ε, δ).
//
// The data-dependent ε depends on the vote histograms, so releasing it
// leaks information about them (Papernot et al. release it only after
// smoothing); Veil reports it for the operator and charges the ledger with
// the same RDP curve, but it is not itself a differentially private
// statistic.
package pate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/veil-privacy/veil/dp"
)

// NoisyArgmax returns arg max_j (votes[j] + Lap(1/γ)), the label released
// by the aggregation (ties to the lowest index). src nil means a fresh
// crypto/rand-seeded source.
func NoisyArgmax(votes []float64, gamma float64, src *dp.Source) (int, error) {
	if err := checkVotes(votes); err != nil {
		return 0, err
	}
	if err := checkGamma(gamma); err != nil {
		return 0, err
	}
	if src == nil {
		var err error
		if src, err = dp.NewSource(); err != nil {
			return 0, err
		}
	}
	best, bestV := 0, math.Inf(-1)
	for j, v := range votes {
		if nv := v + src.Laplace(1/gamma); nv > bestV {
			best, bestV = j, nv
		}
	}
	return best, nil
}

// NoisyLabels draws the label of each histogram (NoisyArgmax), all from
// one source (nil: a fresh crypto/rand-seeded one).
func NoisyLabels(hists [][]float64, gamma float64, src *dp.Source) ([]int, error) {
	if src == nil {
		var err error
		if src, err = dp.NewSource(); err != nil {
			return nil, err
		}
	}
	labels := make([]int, len(hists))
	for i, h := range hists {
		l, err := NoisyArgmax(h, gamma, src)
		if err != nil {
			return nil, err
		}
		labels[i] = l
	}
	return labels, nil
}

func checkGamma(g float64) error {
	if math.IsNaN(g) || math.IsInf(g, 0) || g <= 0 {
		return fmt.Errorf("pate: γ must be a positive finite number, got %g", g)
	}
	return nil
}

func checkVotes(v []float64) error {
	if len(v) < 2 {
		return fmt.Errorf("a vote histogram needs at least 2 classes, got %d", len(v))
	}
	for j, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return fmt.Errorf("vote count %d must be a non-negative finite number, got %g", j, x)
		}
	}
	return nil
}

// QBound returns LightFace Theorem 4's bound on the probability that the
// noisy arg max differs from the plurality class j*:
// Σ_{j≠j*} (2 + γ(n_{j*} − n_j)) / (4·exp(γ(n_{j*} − n_j))), capped at 1.
func QBound(votes []float64, gamma float64) (float64, error) {
	if err := checkVotes(votes); err != nil {
		return 0, err
	}
	if err := checkGamma(gamma); err != nil {
		return 0, err
	}
	top := 0
	for j, v := range votes {
		if v > votes[top] {
			top = j
		}
	}
	var q float64
	for j, v := range votes {
		if j == top {
			continue
		}
		gap := gamma * (votes[top] - v)
		q += (2 + gap) / (4 * math.Exp(gap))
	}
	return math.Min(q, 1), nil
}

// DataIndependentMoment returns LightFace Theorem 2's bound on the l-th log
// moment of one answer, min(2γ²·l(l+1), 2γ·l) (the second is the trivial
// bound of a (2γ, 0)-DP mechanism).
func DataIndependentMoment(gamma, l float64) float64 {
	return math.Min(2*gamma*gamma*l*(l+1), 2*gamma*l)
}

// DataDependentMoment returns the bound of LightFace Theorem 3 on the l-th
// log moment of one answer whose probability of differing from the
// plurality is at most q:
// log((1−q)·((1−q)/(1−e^{2γ}q))^l + q·e^{2γl}), valid when
// q < (e^{2γ}−1)/(e^{4γ}−1); otherwise, or when larger, the
// data-independent bound.
func DataDependentMoment(gamma, q, l float64) float64 {
	ind := DataIndependentMoment(gamma, l)
	if !(q >= 0) || q >= (math.Expm1(2*gamma))/(math.Expm1(4*gamma)) {
		return ind
	}
	a := math.Log1p(-q) + l*(math.Log1p(-q)-math.Log1p(-math.Exp(2*gamma)*q))
	b := math.Log(q) + 2*gamma*l
	v := a
	if q > 0 {
		v = logAdd(a, b)
	}
	return math.Min(v, ind)
}

func logAdd(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// DefaultMoments are the moment orders l = 1, 2, …, 64.
func DefaultMoments() []float64 {
	m := make([]float64, 64)
	for i := range m {
		m[i] = float64(i + 1)
	}
	return m
}

// Analysis is the privacy of a set of noisy-vote answers.
type Analysis struct {
	// Answers is the number of histograms (released labels).
	Answers int `json:"answers"`
	// Epsilon is the data-dependent ε at Delta by the moments accountant,
	// ε = min_l (Σα(l) + ln(1/δ))/l (LightFace Eq. 14), at moment Moment.
	Epsilon float64 `json:"epsilon"`
	Moment  float64 `json:"moment"`
	Delta   float64 `json:"delta"`
	// DataIndependentEpsilon is the same accountant with Theorem 2's
	// moments only.
	DataIndependentEpsilon float64 `json:"data_independent_epsilon"`
	// StrongCompositionEpsilon is the paper's 4Tγ² + 2γ√(2T ln(1/δ)).
	StrongCompositionEpsilon float64 `json:"strong_composition_epsilon"`
	// Event is the data-dependent RDP curve (RDP(l+1) = Σα(l)/l), to charge
	// to a dp.Accountant or dp.Ledger.
	Event dp.Event `json:"event"`
}

// Analyze composes the data-dependent moments of every answer (one vote
// histogram each) with noise Lap(1/γ) and converts to (ε, δ). moments nil
// means DefaultMoments().
func Analyze(hists [][]float64, gamma, delta float64, moments []float64) (Analysis, error) {
	if err := checkGamma(gamma); err != nil {
		return Analysis{}, err
	}
	if math.IsNaN(delta) || delta <= 0 || delta >= 1 {
		return Analysis{}, fmt.Errorf("pate: delta must be in (0, 1), got %g", delta)
	}
	if len(hists) == 0 {
		return Analysis{}, errors.New("pate: no vote histograms")
	}
	if moments == nil {
		moments = DefaultMoments()
	}
	for i, l := range moments {
		if math.IsNaN(l) || math.IsInf(l, 0) || l <= 0 || (i > 0 && l <= moments[i-1]) {
			return Analysis{}, fmt.Errorf("pate: moments must be positive, finite and ascending, got %g", l)
		}
	}
	dep := make([]float64, len(moments))
	ind := make([]float64, len(moments))
	for h, votes := range hists {
		q, err := QBound(votes, gamma)
		if err != nil {
			return Analysis{}, fmt.Errorf("pate: histogram %d: %w", h, err)
		}
		for i, l := range moments {
			dep[i] += DataDependentMoment(gamma, q, l)
			ind[i] += DataIndependentMoment(gamma, l)
		}
	}
	a := Analysis{Answers: len(hists), Delta: delta}
	a.Epsilon, a.Moment = momentsEpsilon(moments, dep, delta)
	a.DataIndependentEpsilon, _ = momentsEpsilon(moments, ind, delta)
	T := float64(len(hists))
	a.StrongCompositionEpsilon = 4*T*gamma*gamma + 2*gamma*math.Sqrt(2*T*math.Log(1/delta))
	orders := make([]float64, len(moments))
	rdp := make([]float64, len(moments))
	for i, l := range moments {
		orders[i] = l + 1
		rdp[i] = dep[i] / l
	}
	ev, err := dp.RDPCurveEvent(orders, rdp, "pate noisy votes")
	if err != nil {
		return Analysis{}, err
	}
	a.Event = ev
	return a, nil
}

// momentsEpsilon is ε = min_l (α(l) + ln(1/δ))/l and the minimising l.
func momentsEpsilon(moments, alpha []float64, delta float64) (float64, float64) {
	best, bestL := math.Inf(1), 0.0
	for i, l := range moments {
		if e := (alpha[i] + math.Log(1/delta)) / l; e < best {
			best, bestL = e, l
		}
	}
	return best, bestL
}

// MaxFileBytes bounds the size of a histogram file ReadHistograms accepts.
const MaxFileBytes = 1 << 28

// ReadHistograms parses a vote-histogram file: a JSON array with one array
// of non-negative vote counts per answer, e.g. [[48, 1, 1], [20, 25, 5]].
// Histograms may differ in length (at least 2 classes each).
func ReadHistograms(r io.Reader) ([][]float64, error) {
	dec := json.NewDecoder(io.LimitReader(r, MaxFileBytes))
	var h [][]float64
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("not a file of vote histograms (want a JSON array of arrays of counts): %w", err)
	}
	if dec.More() {
		return nil, errors.New("vote histograms: trailing data after the array")
	}
	if len(h) == 0 {
		return nil, errors.New("vote histograms: the array is empty")
	}
	for i, v := range h {
		if err := checkVotes(v); err != nil {
			return nil, fmt.Errorf("vote histograms: histogram %d: %w", i, err)
		}
	}
	return h, nil
}
