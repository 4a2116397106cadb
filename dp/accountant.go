package dp

import (
	"fmt"
	"math"
	"slices"
)

// Accountant composes mechanisms by Rényi DP over a fixed set of orders and
// converts the total to (ε, δ). It keeps the list of events so a PLD
// accountant can recompute a tighter ε for the same schedule. Not safe for
// concurrent use (Ledger adds locking).
type Accountant struct {
	orders []float64
	rdp    []float64
	events []Event
	pure   float64 // basic composition of pure-DP bounds (+Inf if none)
}

// NewAccountant returns an empty accountant over the given orders (each > 1,
// strictly ascending); nil or empty means DefaultOrders().
func NewAccountant(orders []float64) (*Accountant, error) {
	if len(orders) == 0 {
		orders = DefaultOrders()
	}
	for i, a := range orders {
		if err := checkOrder(a); err != nil {
			return nil, err
		}
		if i > 0 && a <= orders[i-1] {
			return nil, fmt.Errorf("dp: accountant orders must be strictly ascending, got %g after %g", a, orders[i-1])
		}
	}
	return &Accountant{orders: slices.Clone(orders), rdp: make([]float64, len(orders))}, nil
}

// Orders returns a copy of the accountant's Rényi orders.
func (a *Accountant) Orders() []float64 { return slices.Clone(a.orders) }

// RDP returns a copy of the composed Rényi DP at each order.
func (a *Accountant) RDP() []float64 { return slices.Clone(a.rdp) }

// Events returns a copy of the recorded events, in order.
func (a *Accountant) Events() []Event { return slices.Clone(a.events) }

// curve computes the RDP of events at the accountant's orders.
func (a *Accountant) curve(events ...Event) ([]float64, error) {
	out := make([]float64, len(a.orders))
	for _, e := range events {
		for i, o := range a.orders {
			r, err := e.RDPAt(o)
			if err != nil {
				return nil, err
			}
			out[i] += r
		}
	}
	return out, nil
}

// Add composes events into the accountant. Either all events are added or,
// on error, none.
func (a *Accountant) Add(events ...Event) error {
	c, err := a.curve(events...)
	if err != nil {
		return err
	}
	a.record(c, events)
	return nil
}

// record composes events whose total RDP curve at the accountant's orders
// is c (computed by curve or by a CurveCache).
func (a *Accountant) record(c []float64, events []Event) {
	for i := range a.rdp {
		a.rdp[i] += c[i]
	}
	a.events = append(a.events, events...)
	for _, e := range events {
		a.pure += e.pureEpsilon()
	}
}

// Step composes steps of the Poisson-subsampled Gaussian mechanism with
// sampling rate q ∈ (0, 1] and noise multiplier σ > 0 (one DP-SGD phase).
// Call it once per phase; phases may differ in q and σ.
func (a *Accountant) Step(q, sigma float64, steps int) error {
	e, err := SubsampledGaussianEvent(q, sigma, steps)
	if err != nil {
		return err
	}
	return a.Add(e)
}

// Epsilon returns the smallest ε over the orders for which everything
// composed so far is (ε, δ)-DP, and the order that attains it. When every
// event is pure DP (Laplace, pure-DP events) and their basic composition
// Σε is smaller, that ε is returned with order 0. An empty accountant
// reports ε = 0.
func (a *Accountant) Epsilon(delta float64) (eps, order float64, err error) {
	if err := checkDelta(delta); err != nil {
		return 0, 0, err
	}
	if len(a.events) == 0 {
		return 0, math.NaN(), nil
	}
	eps, order, err = RDPToDP(a.orders, a.rdp, delta)
	if a.pure < eps {
		return a.pure, 0, nil
	}
	return eps, order, err
}

// Clone returns an independent copy of the accountant.
func (a *Accountant) Clone() *Accountant {
	return &Accountant{orders: slices.Clone(a.orders), rdp: slices.Clone(a.rdp), events: slices.Clone(a.events), pure: a.pure}
}

// ScheduleEpsilon returns (ε, order) by RDP for steps of the subsampled
// Gaussian mechanism at sampling rate q and noise multiplier σ, over the
// default orders.
func ScheduleEpsilon(q, sigma float64, steps int, delta float64) (eps, order float64, err error) {
	a, err := NewAccountant(nil)
	if err != nil {
		return 0, 0, err
	}
	if err := a.Step(q, sigma, steps); err != nil {
		return 0, 0, err
	}
	return a.Epsilon(delta)
}

// NoiseMultiplier returns the smallest noise multiplier σ (to a relative
// precision of 1e-4, always on the safe side) for which steps of the
// subsampled Gaussian mechanism at sampling rate q are (targetEps, δ)-DP by
// the RDP accountant over the default orders. A target the accountant
// cannot certify at any noise level (at or below EpsilonFloor) is refused
// with an explanation.
func NoiseMultiplier(q float64, steps int, targetEps, delta float64) (float64, error) {
	if err := checkInverseArgs(q, steps, targetEps, delta); err != nil {
		return 0, err
	}
	return inverseNoise(targetEps, delta, func(s float64) (float64, error) {
		e, _, err := ScheduleEpsilon(q, s, steps, delta)
		return e, err
	})
}

// SGDNoiseMultiplier returns the smallest noise multiplier σ (relative
// precision 1e-4, on the safe side) for which steps of DPSGD with the
// settings cfg (its NoiseMultiplier is ignored) are (targetEps, δ)-DP by
// the RDP accountant, counting what DPSGD.Event charges: the discrete
// Gaussian with the effective multiplier after rounding to the grid. It is
// not NoiseMultiplier's answer (the continuous Gaussian): the discrete
// Gaussian's RDP at fractional orders is bounded by the chord between
// integer orders, so at large ε, where the best order is small, it needs
// more noise (σ = 1.3242 instead of 1.3038 for the main job's ε = 8 over
// 160 steps at q = 512/4038).
func SGDNoiseMultiplier(cfg SGDConfig, steps int, targetEps, delta float64) (float64, error) {
	if err := checkInverseArgs(cfg.SamplingRate, steps, targetEps, delta); err != nil {
		return 0, err
	}
	cfg.NoiseMultiplier = 1
	if err := cfg.Validate(); err != nil {
		return 0, inContext("DP-SGD settings", err)
	}
	return inverseNoise(targetEps, delta, func(s float64) (float64, error) {
		c := cfg
		c.NoiseMultiplier = s
		e, _, err := SGDEpsilon(c, steps, delta)
		return e, err
	})
}

// SGDEpsilon returns (ε, order) by RDP over the default orders after steps
// of DPSGD with the settings cfg: exactly what DPSGD.Event(steps) charges
// to a Ledger or Accountant (the Poisson-subsampled discrete Gaussian with
// the effective multiplier of cfg's grid), so it is the ε a trainer or
// ledger reports for that schedule. cfg.ExpectedBatchSize and Workers do
// not change it (they must still be valid).
func SGDEpsilon(cfg SGDConfig, steps int, delta float64) (eps, order float64, err error) {
	mu, err := cfg.EffectiveNoiseMultiplier()
	if err != nil {
		return 0, 0, err
	}
	return DiscreteScheduleEpsilon(cfg.SamplingRate, mu, steps, delta)
}

// DiscreteScheduleEpsilon returns (ε, order) by RDP over the default
// orders for steps of the Poisson-subsampled discrete Gaussian on the
// integer lattice with sampling rate q and noise multiplier σ (integer
// noise parameter over integer L2 sensitivity). It is never below
// ScheduleEpsilon's figure for the continuous Gaussian: the two agree at
// integer orders, and fractional orders use the chord between them.
func DiscreteScheduleEpsilon(q, sigma float64, steps int, delta float64) (eps, order float64, err error) {
	ev, err := SubsampledDiscreteGaussianEvent(q, sigma, steps)
	if err != nil {
		return 0, 0, err
	}
	a, err := NewAccountant(nil)
	if err != nil {
		return 0, 0, err
	}
	if err := a.Add(ev); err != nil {
		return 0, 0, err
	}
	return a.Epsilon(delta)
}

// DiscreteNoiseMultiplier is NoiseMultiplier for the Poisson-subsampled
// discrete Gaussian on the integer lattice (DiscreteScheduleEpsilon): the
// smallest σ, to a relative 1e-4 on the safe side, for which steps at
// sampling rate q are (targetEps, δ)-DP.
func DiscreteNoiseMultiplier(q float64, steps int, targetEps, delta float64) (float64, error) {
	if err := checkInverseArgs(q, steps, targetEps, delta); err != nil {
		return 0, err
	}
	return inverseNoise(targetEps, delta, func(s float64) (float64, error) {
		e, _, err := DiscreteScheduleEpsilon(q, s, steps, delta)
		return e, err
	})
}

// checkInverseArgs validates the arguments of the noise calibrations, in
// words a user of the command line understands.
func checkInverseArgs(q float64, steps int, targetEps, delta float64) error {
	if err := checkSamplingRate(q); err != nil {
		return err
	}
	if steps < 1 {
		return fmt.Errorf("dp: the number of steps must be at least 1, got %d", steps)
	}
	if err := checkEpsilon(targetEps); err != nil {
		return err
	}
	return checkDelta(delta)
}

// maxNoiseMultiplier bounds the search of inverseNoise.
const maxNoiseMultiplier = 1e9

// inverseNoise finds, by doubling then bisection, the smallest σ with
// epsAt(σ) ≤ target (ε falls as σ grows), to a relative 1e-4, returning
// the upper end of the final bracket (the safe side).
func inverseNoise(target, delta float64, epsAt func(float64) (float64, error)) (float64, error) {
	floor, err := EpsilonFloor(nil, delta)
	if err != nil {
		return 0, err
	}
	if target <= floor {
		return 0, fmt.Errorf("dp: ε = %g at δ = %g cannot be reached: with Rényi orders up to %g the accountant certifies no ε below %.4g at this δ, however much noise is added; ask for a larger ε or a larger δ",
			target, delta, DefaultOrders()[len(DefaultOrders())-1], floor)
	}
	lo, hi := 0.0, 1.0
	for {
		e, err := epsAt(hi)
		if err != nil {
			return 0, err
		}
		if e <= target {
			break
		}
		lo = hi
		hi *= 2
		if hi > maxNoiseMultiplier {
			return 0, fmt.Errorf("dp: ε = %g at δ = %g would need a noise multiplier above %g (the noise would swamp any signal); ask for a larger ε, a larger δ, fewer steps or a smaller sampling rate",
				target, delta, float64(maxNoiseMultiplier))
		}
	}
	for hi-lo > 1e-4*hi {
		mid := (lo + hi) / 2
		e, err := epsAt(mid)
		if err != nil {
			return 0, err
		}
		if e <= target {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}
