package dphe

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/dp/svt"
)

// Selection chooses which blocks of an update a user sends by Irene's
// sparse vector (dp/svt, Algorithm 3 of the Irene paper, with the proven
// costs svt.IreneCost charges), so that the support DPHE hides is itself
// differentially private, and adds the Gaussian noise of Privacy to the
// selected coordinates only.
//
// A block is one DPHE position: Lanes consecutive coordinates when the
// round packs (Packing), else one coordinate. Its score is the L2 norm of
// the clipped update's block, in [0, Clip]. Between the update being
// present and absent every score moves by at most Clip at once (ℓ∞
// sensitivity Clip, the unit being the user's whole update, as for
// Privacy), so Irene's selection runs with sensitivity Δ = Clip and
// γ₂ = Clip. Only the selected blocks leave the user (Irene's noisy
// answers are drawn, then dropped, never sent), so the ledger is charged
// the selection runs (svt.IreneCost's first event) and, for the values,
// the Gaussian mechanism on exactly Count·Lanes coordinates (the selected
// blocks, padded with zeros when fewer are selected: the padding's noise
// is dropped), whose L2 sensitivity given the selection is Clip. The
// charges compose adaptively (the release uses the selection's output).
//
// At user-level units the selection's noise scale is Irene's
// σ(ε₁)·Clip = √(32·Count·ln(2/δ))/ε₁·Clip, far above the scores (at
// most Clip) unless ε is large: a selection at small ε is close to
// uniform, and its utility is that of a random subset of Count blocks.
// That is the cost of hiding from the key generator which coordinates a
// user changed; DPHE's permutations hide them from the aggregator
// whatever the selection.
type Selection struct {
	// Epsilon and Delta are Irene's ε and δ (what its scales are computed
	// from; the ledger is charged the proven cost, not these).
	Epsilon, Delta float64
	// Threshold γ₃ is compared with a block's L2 norm.
	Threshold float64
	// Count γ₄ is the most blocks selected.
	Count int
}

// irene returns the svt parameters of the selection for clip C.
func (s *Selection) irene(clip float64) svt.IreneParams {
	return svt.IreneParams{Epsilon: s.Epsilon, Delta: s.Delta, Clip: clip, Threshold: s.Threshold, MaxCount: s.Count, Sensitivity: clip}
}

// events returns the selection's charge and the values' Gaussian release.
func (s *Selection) events(clip, sigma float64, lanes int) ([]dp.Event, error) {
	cost, err := svt.IreneCost(s.irene(clip))
	if err != nil {
		return nil, fmt.Errorf("dphe: selection: %w", err)
	}
	g, err := dp.GaussianGrid(sigma*clip, s.Count*lanes)
	if err != nil {
		return nil, fmt.Errorf("dphe: selection: %w", err)
	}
	mu, err := g.GaussianMultiplier(clip)
	if err != nil {
		return nil, fmt.Errorf("dphe: selection: %w", err)
	}
	gauss, err := dp.GaussianEvent(mu, 1)
	if err != nil {
		return nil, fmt.Errorf("dphe: selection: %w", err)
	}
	gauss.Label = "dphe selected values"
	sel := cost.Events[0]
	sel.Label = "dphe selection"
	return []dp.Event{sel, gauss}, nil
}

// release selects blocks of the clipped update w and returns the update
// with Gaussian noise of standard deviation sd on the selected blocks'
// coordinates and zeros elsewhere.
func (s *Selection) release(w []float64, lanes int, sd, clip float64, src *dp.Source) ([]float64, error) {
	blocks := (len(w) + lanes - 1) / lanes
	norms := make([]float64, blocks)
	for b := range norms {
		var ss float64
		for _, x := range w[b*lanes : min((b+1)*lanes, len(w))] {
			ss += x * x
		}
		norms[b] = math.Sqrt(ss)
	}
	res, err := svt.Irene(s.irene(clip), norms, src)
	if err != nil {
		return nil, fmt.Errorf("dphe: selection: %w", err)
	}
	vals := make([]float64, s.Count*lanes) // fixed length: the grid the charge assumes
	for i, b := range res.Selected {
		copy(vals[i*lanes:(i+1)*lanes], w[b*lanes:min((b+1)*lanes, len(w))])
	}
	src.AddGaussian64(vals, sd)
	out := make([]float64, len(w))
	for i, b := range res.Selected {
		copy(out[b*lanes:min((b+1)*lanes, len(w))], vals[i*lanes:(i+1)*lanes])
	}
	return out, nil
}
