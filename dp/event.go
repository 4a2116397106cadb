package dp

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
)

// Kind names a mechanism whose privacy cost an Event records.
type Kind string

// The mechanisms an Accountant or Ledger can charge.
const (
	// KindSubsampledGaussian is the Poisson-subsampled Gaussian (DP-SGD step).
	KindSubsampledGaussian Kind = "subsampled_gaussian"
	// KindSubsampledDiscreteGaussian is the Poisson-subsampled discrete
	// Gaussian on an integer lattice (DPSGD's exact noise); its
	// NoiseMultiplier is the effective one after rounding to the grid.
	KindSubsampledDiscreteGaussian Kind = "subsampled_discrete_gaussian"
	// KindGaussian is the Gaussian mechanism without subsampling.
	KindGaussian Kind = "gaussian"
	// KindLaplace is the Laplace mechanism.
	KindLaplace Kind = "laplace"
	// KindPureDP is any ε-DP mechanism (e.g. one AboveThreshold run).
	KindPureDP Kind = "pure_dp"
	// KindRDPCurve is a mechanism known only by its RDP curve (e.g. the
	// data-dependent PATE bound).
	KindRDPCurve Kind = "rdp_curve"
)

// Event records Count repetitions of one mechanism. Build Events with the
// constructors (SubsampledGaussianEvent, …), which validate parameters.
// Events are JSON-serialisable and are what a Ledger persists.
type Event struct {
	Kind Kind `json:"kind"`
	// SamplingRate is q for the subsampled kinds.
	SamplingRate float64 `json:"sampling_rate,omitempty"`
	// NoiseMultiplier is σ/Δ₂ for the Gaussian kinds.
	NoiseMultiplier float64 `json:"noise_multiplier,omitempty"`
	// LaplaceScale is b/Δ₁ for KindLaplace.
	LaplaceScale float64 `json:"laplace_scale,omitempty"`
	// Epsilon is ε for KindPureDP.
	Epsilon float64 `json:"epsilon,omitempty"`
	// Orders and RDP give the curve for KindRDPCurve (orders ascending).
	Orders []float64 `json:"orders,omitempty"`
	RDP    []float64 `json:"rdp,omitempty"`
	// Count is the number of repetitions (≥ 1).
	Count int `json:"count"`
	// Label is a free-form note, e.g. "dp-sgd round 3". Never put private data here.
	Label string `json:"label,omitempty"`
}

// SubsampledGaussianEvent records steps of the Poisson-subsampled Gaussian
// mechanism with sampling rate q ∈ (0, 1] and noise multiplier σ > 0.
func SubsampledGaussianEvent(q, sigma float64, steps int) (Event, error) {
	e := Event{Kind: KindSubsampledGaussian, SamplingRate: q, NoiseMultiplier: sigma, Count: steps}
	return e, e.Validate()
}

// SubsampledDiscreteGaussianEvent records steps of the Poisson-subsampled
// discrete Gaussian with sampling rate q ∈ (0, 1] and noise multiplier
// σ > 0 (integer noise parameter over integer L2 sensitivity; DPSGD.Event
// builds it with the effective multiplier after rounding).
func SubsampledDiscreteGaussianEvent(q, sigma float64, steps int) (Event, error) {
	e := Event{Kind: KindSubsampledDiscreteGaussian, SamplingRate: q, NoiseMultiplier: sigma, Count: steps}
	return e, e.Validate()
}

// GaussianEvent records count uses of the Gaussian mechanism with noise
// multiplier σ = std/Δ₂.
func GaussianEvent(sigma float64, count int) (Event, error) {
	e := Event{Kind: KindGaussian, NoiseMultiplier: sigma, Count: count}
	return e, e.Validate()
}

// LaplaceEvent records count uses of the Laplace mechanism with scale
// λ = b/Δ₁.
func LaplaceEvent(lambda float64, count int) (Event, error) {
	e := Event{Kind: KindLaplace, LaplaceScale: lambda, Count: count}
	return e, e.Validate()
}

// PureDPEvent records count uses of an ε-DP mechanism.
func PureDPEvent(eps float64, count int) (Event, error) {
	e := Event{Kind: KindPureDP, Epsilon: eps, Count: count}
	return e, e.Validate()
}

// RDPCurveEvent records a mechanism by its RDP values at ascending orders.
// At an order between listed ones the next larger listed order is used
// (RDP is non-decreasing in α); above the last listed order it is +Inf.
func RDPCurveEvent(orders, rdp []float64, label string) (Event, error) {
	e := Event{Kind: KindRDPCurve, Orders: slices.Clone(orders), RDP: slices.Clone(rdp), Count: 1, Label: label}
	return e, e.Validate()
}

// String describes the mechanism in words, for messages.
func (k Kind) String() string {
	switch k {
	case KindSubsampledGaussian:
		return "DP-SGD (Poisson-subsampled Gaussian)"
	case KindSubsampledDiscreteGaussian:
		return "DP-SGD (Poisson-subsampled discrete Gaussian)"
	case KindGaussian:
		return "Gaussian mechanism"
	case KindLaplace:
		return "Laplace mechanism"
	case KindPureDP:
		return "ε-DP mechanism"
	case KindRDPCurve:
		return "mechanism given by its Rényi DP curve"
	}
	return fmt.Sprintf("unknown mechanism %q", string(k))
}

// Validate reports whether the event's parameters are usable.
func (e Event) Validate() error {
	return inContext(e.Kind.String(), e.validate())
}

func (e Event) validate() error {
	if e.Count < 1 {
		what := "number of uses"
		if e.Kind == KindSubsampledGaussian || e.Kind == KindSubsampledDiscreteGaussian {
			what = "number of steps"
		}
		return fmt.Errorf("the %s must be at least 1, got %d", what, e.Count)
	}
	switch e.Kind {
	case KindSubsampledGaussian, KindSubsampledDiscreteGaussian:
		if err := checkSamplingRate(e.SamplingRate); err != nil {
			return err
		}
		return checkPositive("noise multiplier", e.NoiseMultiplier)
	case KindGaussian:
		return checkPositive("noise multiplier", e.NoiseMultiplier)
	case KindLaplace:
		return checkPositive("Laplace scale over sensitivity", e.LaplaceScale)
	case KindPureDP:
		return checkEpsilon(e.Epsilon)
	case KindRDPCurve:
		if len(e.Orders) == 0 || len(e.Orders) != len(e.RDP) {
			return fmt.Errorf("the curve needs equal, non-zero numbers of orders and values, got %d and %d", len(e.Orders), len(e.RDP))
		}
		for i, a := range e.Orders {
			if err := checkOrder(a); err != nil {
				return err
			}
			if i > 0 && a <= e.Orders[i-1] {
				return fmt.Errorf("the curve's orders must be strictly ascending, got %g after %g", a, e.Orders[i-1])
			}
			if r := e.RDP[i]; math.IsNaN(r) || r < 0 || math.IsInf(r, 0) {
				return fmt.Errorf("the curve's value at order %g must be a finite number ≥ 0, got %g (a mechanism with unbounded loss at some order should list only the orders where it is finite)", a, r)
			}
		}
		return nil
	default:
		return errors.New("not a mechanism this accountant knows")
	}
}

// RDPAt returns the total Rényi DP of the event (all Count repetitions) at
// order α.
func (e Event) RDPAt(alpha float64) (float64, error) {
	if err := e.Validate(); err != nil {
		return 0, err
	}
	var r float64
	var err error
	switch e.Kind {
	case KindSubsampledGaussian:
		r, err = SubsampledGaussianRDP(e.SamplingRate, e.NoiseMultiplier, alpha)
	case KindSubsampledDiscreteGaussian:
		r, err = SubsampledDiscreteGaussianRDP(e.SamplingRate, e.NoiseMultiplier, alpha)
	case KindGaussian:
		r, err = GaussianRDP(e.NoiseMultiplier, alpha)
	case KindLaplace:
		r, err = LaplaceRDP(e.LaplaceScale, alpha)
	case KindPureDP:
		r, err = PureDPRDP(e.Epsilon, alpha)
	case KindRDPCurve:
		if err := checkOrder(alpha); err != nil {
			return 0, err
		}
		i, _ := slices.BinarySearch(e.Orders, alpha)
		if i == len(e.Orders) {
			r = math.Inf(1)
		} else {
			r = e.RDP[i]
		}
	}
	if err != nil {
		return 0, err
	}
	return r * float64(e.Count), nil
}

// pldCapable reports whether the PLD accountant can compose this event.
func (e Event) pldCapable() bool {
	return e.Kind == KindSubsampledGaussian || e.Kind == KindGaussian
}

// pureEpsilon returns the event's total ε under pure DP (basic
// composition over Count), +Inf for mechanisms without a pure-DP bound.
func (e Event) pureEpsilon() float64 {
	switch e.Kind {
	case KindPureDP:
		return e.Epsilon * float64(e.Count)
	case KindLaplace:
		return float64(e.Count) / e.LaplaceScale
	default:
		return math.Inf(1)
	}
}

// CurveCache memoises the Rényi DP curve of one use of a mechanism (an
// Event with Count 1) at a fixed set of orders, keyed by the mechanism's
// kind and parameters. A coordinator charging many clients that run the
// same DP-SGD settings computes each curve once instead of once per charge
// (the subsampled Gaussian's curve costs a series per order). The curve
// of an event with Count n is the cached one times n, the same arithmetic
// Event.RDPAt does, so a charge through a cache is bit-for-bit the charge
// without one. Events given by their curve (KindRDPCurve) are not cached.
// A CurveCache is safe for concurrent use; attach it to ledgers with
// Ledger.UseCurveCache.
type CurveCache struct {
	orders []float64
	max    int

	mu sync.Mutex
	m  map[curveKey][]float64
}

// curveKey is what determines one use's curve, besides the orders.
type curveKey struct {
	kind                                  Kind
	samplingRate, noise, laplace, epsilon float64
}

// NewCurveCache returns a cache of curves at the given orders (nil means
// DefaultOrders(), what ledgers use by default) holding at most max curves
// (max ≤ 0: 1024); when full it is emptied and refilled, so a stream of
// distinct parameters cannot grow it without bound.
func NewCurveCache(orders []float64, max int) (*CurveCache, error) {
	a, err := NewAccountant(orders)
	if err != nil {
		return nil, inContext("curve cache", err)
	}
	if max <= 0 {
		max = 1024
	}
	return &CurveCache{orders: a.orders, max: max, m: map[curveKey][]float64{}}, nil
}

// Len returns the number of curves cached.
func (c *CurveCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// serves reports whether the cache's orders are exactly orders.
func (c *CurveCache) serves(orders []float64) bool {
	return c != nil && slices.Equal(c.orders, orders)
}

// curve returns the total RDP of events at the cache's orders, as
// Accountant.curve computes it.
func (c *CurveCache) curve(events ...Event) ([]float64, error) {
	out := make([]float64, len(c.orders))
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return nil, err
		}
		if e.Kind == KindRDPCurve {
			for i, o := range c.orders {
				r, err := e.RDPAt(o)
				if err != nil {
					return nil, err
				}
				out[i] += r
			}
			continue
		}
		one, err := c.once(e)
		if err != nil {
			return nil, err
		}
		n := float64(e.Count)
		for i, r := range one {
			out[i] += r * n
		}
	}
	return out, nil
}

// once returns the curve of one use of e's mechanism (e already valid).
func (c *CurveCache) once(e Event) ([]float64, error) {
	k := curveKey{kind: e.Kind, samplingRate: e.SamplingRate, noise: e.NoiseMultiplier, laplace: e.LaplaceScale, epsilon: e.Epsilon}
	c.mu.Lock()
	one, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return one, nil
	}
	// Computed outside the lock; two goroutines may both compute a
	// missing curve, and store the same values.
	unit := Event{Kind: e.Kind, SamplingRate: e.SamplingRate, NoiseMultiplier: e.NoiseMultiplier, LaplaceScale: e.LaplaceScale, Epsilon: e.Epsilon, Count: 1}
	one = make([]float64, len(c.orders))
	for i, o := range c.orders {
		r, err := unit.RDPAt(o)
		if err != nil {
			return nil, err
		}
		one[i] = r
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = one
	c.mu.Unlock()
	return one, nil
}
