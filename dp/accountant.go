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
	for i := range a.rdp {
		a.rdp[i] += c[i]
	}
	a.events = append(a.events, events...)
	for _, e := range events {
		a.pure += e.pureEpsilon()
	}
	return nil
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
// the RDP accountant over the default orders.
func NoiseMultiplier(q float64, steps int, targetEps, delta float64) (float64, error) {
	if err := checkSamplingRate(q); err != nil {
		return 0, err
	}
	if steps < 1 {
		return 0, fmt.Errorf("dp: steps must be at least 1, got %d", steps)
	}
	if err := checkEpsilon(targetEps); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	epsAt := func(s float64) (float64, error) {
		e, _, err := ScheduleEpsilon(q, s, steps, delta)
		return e, err
	}
	lo, hi := 0.0, 1.0
	for {
		e, err := epsAt(hi)
		if err != nil {
			return 0, err
		}
		if e <= targetEps {
			break
		}
		lo = hi
		hi *= 2
		if hi > 1e6 {
			return 0, fmt.Errorf("dp: no noise multiplier up to 1e6 reaches epsilon=%g", targetEps)
		}
	}
	for hi-lo > 1e-4*hi {
		mid := (lo + hi) / 2
		e, err := epsAt(mid)
		if err != nil {
			return 0, err
		}
		if e <= targetEps {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}
