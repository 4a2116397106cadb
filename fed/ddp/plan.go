package ddp

import (
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/secagg/quant"
)

// Plan is what a coordinator proposes for the rounds of distributed
// DP-SGD: every selected client of a round runs the same Plan (the noise
// share too: a client's guarantee rests on the other honest clients adding
// as much as it assumes). The coordinator chooses it; each client checks
// it against its own Policy (CheckPlan) and refuses a weaker one.
type Plan struct {
	// Unit is the privacy unit: "identity" or "example".
	Unit string
	// Delta is δ of the accounting.
	Delta float64
	// Clip is C, the L2 norm each unit's gradient is clipped to.
	Clip float64
	// SamplingRate is q: each client samples each of its units with this
	// probability, per round.
	SamplingRate float64
	// Rounds is how many rounds (steps) the coordinator plans.
	Rounds int
	// Clients is n, the most clients whose encodings one round sums (the
	// wrap bound's n).
	Clients int
	// Threshold is t: secure aggregation unmasks no sum of fewer than t
	// clients' inputs.
	Threshold int
	// Noise is σ, each client's discrete Gaussian parameter in lattice
	// units.
	Noise uint64
	// Dim is d, the length of the gradient.
	Dim int
	// Block is the Walsh–Hadamard block size (a power of two; 0: one
	// block).
	Block int
	// Scale is C/γ, the clip in lattice units (γ = Clip/Scale).
	Scale float64
	// SumClip is the L2 norm a client's whole sum of clipped gradients is
	// clipped to before encoding, in units of C (a multiple of C; 0: the
	// default, DefaultSumClip). Clipping the sum is 1-Lipschitz, so it
	// costs no privacy, only accuracy when reached.
	SumClip float64
	// Bits is b: sums live in Z_(2^b).
	Bits int
	// WrapProb is the accepted probability that a round's sum wraps.
	WrapProb float64
	// ExpectedBatch is the public divisor of the released sum (q times
	// the number of units in the federation): post-processing.
	ExpectedBatch float64
}

// checkUnitClipRate checks what a plan and a policy share: the unit, a
// (largest) clip and a (largest) sampling rate.
func checkUnitClipRate(what, unit string, clip, q float64) error {
	switch {
	case unit != dp.UnitIdentity && unit != dp.UnitExample:
		return fmt.Errorf("ddp: %s: privacy unit %q (want identity or example)", what, unit)
	case !(clip > 0) || math.IsInf(clip, 0):
		return fmt.Errorf("ddp: %s: the clip must be positive and finite, got %g", what, clip)
	case !(q > 0 && q <= 1):
		return fmt.Errorf("ddp: %s: the sampling rate must be in (0, 1], got %g", what, q)
	}
	return nil
}

// DefaultSumClip is the default Plan.SumClip, in units of C.
const DefaultSumClip = 64

// sumClip returns the sum's clip in gradient units.
func (p Plan) sumClip() float64 {
	s := p.SumClip
	if s == 0 {
		s = DefaultSumClip
	}
	return s * p.Clip
}

// Validate checks the plan's own consistency (not any client's policy).
func (p Plan) Validate() error {
	if err := checkUnitClipRate("plan", p.Unit, p.Clip, p.SamplingRate); err != nil {
		return err
	}
	switch {
	case !(p.Delta > 0 && p.Delta < 1):
		return fmt.Errorf("ddp: plan: δ must be in (0, 1), got %g", p.Delta)
	case p.Rounds < 1:
		return fmt.Errorf("ddp: plan: at least one round, got %d", p.Rounds)
	case p.Threshold < 1 || p.Threshold > p.Clients:
		return fmt.Errorf("ddp: plan: the threshold must be in [1, %d clients], got %d", p.Clients, p.Threshold)
	case !(p.Scale >= 1) || math.IsInf(p.Scale, 0):
		return fmt.Errorf("ddp: plan: the clip in lattice units must be at least 1 and finite, got %g", p.Scale)
	case !(p.SumClip == 0 || p.SumClip >= 1) || math.IsInf(p.SumClip, 0):
		return fmt.Errorf("ddp: plan: the sum's clip must be 0 (default) or at least 1 (in units of C), got %g", p.SumClip)
	case !(p.ExpectedBatch > 0) || math.IsInf(p.ExpectedBatch, 0):
		return fmt.Errorf("ddp: plan: the expected batch must be positive and finite, got %g", p.ExpectedBatch)
	case p.Noise < 1:
		return fmt.Errorf("ddp: plan: each client's noise must be at least 1 lattice unit, got %d", p.Noise)
	}
	_, err := quant.Bound(p.quantConfig())
	return err
}

// quantConfig is the quantisation of the plan: conditional rounding off
// (β = 0, so that one unit's effect on the rounded vector is bounded by a
// coupling: package documentation, step 3).
func (p Plan) quantConfig() quant.Config {
	return quant.Config{Dim: p.Dim, Block: p.Block, ClipNorm: p.sumClip(), Gamma: p.Clip / p.Scale, Beta: 0,
		Bits: p.Bits, Noise: p.Noise, Clients: p.Clients, WrapProb: p.WrapProb}
}

// Padded is D', the length of the encodings.
func (p Plan) Padded() int { return p.quantConfig().Padded() }

// Sensitivity is the L2 norm, on the lattice, of what one unit can change
// in a client's rounded encoding: C/γ + √D' (package documentation, Step
// 2), with C/γ raised by FloatSlack for the floating-point clip.
func (p Plan) Sensitivity() float64 {
	return p.Scale*(1+FloatSlack) + math.Sqrt(float64(p.Padded()))
}

// FloatSlack is the relative margin the sensitivity allows a unit's
// clipped gradient, clipped and summed in floating point, over C: float32
// rounding of a norm over a million values stays far below it.
const FloatSlack = 1e-4

// Mechanism is the round's mechanism for a client that trusts honest
// clients' noise to be in every sum.
func (p Plan) Mechanism(honest int) Mechanism {
	return Mechanism{SamplingRate: p.SamplingRate, Noise: p.Noise, Honest: honest, L2: p.Sensitivity(), Dim: p.Padded()}
}

// Policy is a client owner's policy for distributed DP-SGD: what it
// protects, its budget, and what it trusts. It comes from the owner (see
// fed/client.Policy.Distributed), never from the coordinator.
type Policy struct {
	// Unit is the privacy unit the budget protects.
	Unit string
	// Budget is the client's ε and δ; the client's own rounds (Rounds)
	// must fit in Budget.Epsilon.
	Budget dp.Budget
	// MaxClip and MaxSamplingRate cap C and q.
	MaxClip, MaxSamplingRate float64
	// MinHonest is T: the owner trusts that at least T honest clients
	// (each adding the plan's noise share) survive into every unmasked sum
	// besides the colluders. 0 turns distributed DP off for this client.
	MinHonest int
	// MaxColluders is how many of a round's clients the owner assumes
	// may collude with the coordinator (and add no noise): a plan's
	// threshold must be at least MinHonest + MaxColluders.
	MaxColluders int
	// Rounds is how many rounds the owner calibrates its required noise
	// for: the noise share must make Rounds rounds fit in the budget.
	Rounds int
	// MaxWrapProb caps the probability that a round's sum wraps (an
	// accuracy setting: a wrap costs no privacy). 0: 1e-6.
	MaxWrapProb float64
}

// ErrPolicy is what CheckPlan's refusals wrap.
var ErrPolicy = errors.New("outside this client's distributed DP policy")

// PlanError names the setting a plan was refused for.
type PlanError struct {
	// Setting is the policy setting ("threshold", "noise", ...).
	Setting string
	// Msg says what the plan asks and what the policy allows.
	Msg string
}

func (e *PlanError) Error() string { return "ddp: the plan " + e.Msg }

// Unwrap returns ErrPolicy.
func (e *PlanError) Unwrap() error { return ErrPolicy }

func refuse(setting, format string, a ...any) error {
	return &PlanError{Setting: setting, Msg: fmt.Sprintf(format, a...)}
}

// Validate checks the policy's settings.
func (pol Policy) Validate() error {
	if err := pol.Budget.Validate(); err != nil {
		return fmt.Errorf("ddp: policy: %w", err)
	}
	if err := checkUnitClipRate("policy", pol.Unit, pol.MaxClip, pol.MaxSamplingRate); err != nil {
		return err
	}
	switch {
	case pol.MinHonest < 1:
		return fmt.Errorf("ddp: policy: distributed DP needs at least one trusted honest client (MinHonest), got %d", pol.MinHonest)
	case pol.MaxColluders < 0:
		return fmt.Errorf("ddp: policy: the number of colluders must not be negative, got %d", pol.MaxColluders)
	case pol.Rounds < 1:
		return fmt.Errorf("ddp: policy: the rounds the noise is calibrated for must be at least 1, got %d", pol.Rounds)
	case !(pol.MaxWrapProb >= 0 && pol.MaxWrapProb < 1):
		return fmt.Errorf("ddp: policy: the largest wrap probability must be in [0, 1), got %g", pol.MaxWrapProb)
	}
	return nil
}

// DefaultMaxWrapProb is Policy.MaxWrapProb's default.
const DefaultMaxWrapProb = 1e-6

// RequiredNoise is the least noise share σ (lattice units) with which the
// policy's own Rounds rounds of plan's mechanism, with the policy's own T
// honest clients, spend at most its budget's ε at its δ. Nothing in it
// comes from the coordinator but the quantisation (which only sets the
// lattice's units; the sensitivity is computed here) and q, C, which
// CheckPlan caps.
func RequiredNoise(pol Policy, plan Plan) (uint64, error) {
	if err := pol.Validate(); err != nil {
		return 0, err
	}
	m := plan.Mechanism(pol.MinHonest)
	m.Noise = 1
	if err := m.Validate(); err != nil {
		return 0, err
	}
	within := func(s uint64) (bool, error) {
		m.Noise = s
		eps, err := m.Epsilon(pol.Rounds, pol.Budget.Delta)
		if err != nil {
			return false, err
		}
		return eps <= pol.Budget.Epsilon, nil
	}
	// Start from the discrete Gaussian's calibration (the τ → 0 limit),
	// then search the integers around it.
	mult, err := dp.DiscreteNoiseMultiplier(plan.SamplingRate, pol.Rounds, pol.Budget.Epsilon, pol.Budget.Delta)
	if err != nil {
		return 0, fmt.Errorf("ddp: calibrating the noise share: %w", err)
	}
	guess := math.Ceil(mult * m.L2 / math.Sqrt(float64(pol.MinHonest)))
	if guess > 1<<31 {
		return 0, fmt.Errorf("ddp: the noise share would pass 2^31 lattice units (%g): lower the plan's scale", guess)
	}
	hi := uint64(max(guess, 1))
	for {
		ok, err := within(hi)
		if err != nil {
			return 0, err
		}
		if ok {
			break
		}
		if hi >= 1<<30 {
			return 0, errors.New("ddp: no noise share up to 2^31 lattice units meets the budget")
		}
		hi *= 2
	}
	lo := uint64(0) // lo fails (or is 0), hi meets the budget
	if hi > 1 {
		lo = hi - hi/64 - 1
		if ok, err := within(lo); err != nil {
			return 0, err
		} else if ok {
			lo = 0
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := within(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// CheckPlan checks a coordinator's plan against the client's own policy,
// before the client touches its data or its ledger: the unit, δ, the clip,
// the sampling rate, the threshold (at least MinHonest + MaxColluders, so
// that every unmasked sum holds MinHonest honest clients' noise), the
// noise share (at least RequiredNoise of the policy: the policy's own T,
// rounds and budget, never a count the coordinator supplies) and the wrap
// probability. A refusal wraps ErrPolicy in a *PlanError naming the
// setting. h/secagg-fed's client calls it from its round handling; the
// client then charges ChargeEvent to its ledger (which refuses a round
// past the budget) and encodes with Encode.
func CheckPlan(pol Policy, plan Plan) error {
	if err := pol.Validate(); err != nil {
		return err
	}
	if err := plan.Validate(); err != nil {
		return refuse("plan", "is malformed: %v", err)
	}
	wrap := pol.MaxWrapProb
	if wrap == 0 {
		wrap = DefaultMaxWrapProb
	}
	switch {
	case plan.Unit != pol.Unit:
		return refuse("privacy unit", "asks for privacy unit %q; this client protects %q", plan.Unit, pol.Unit)
	case plan.Delta > pol.Budget.Delta:
		return refuse("delta", "asks for δ = %g; this client accounts at δ = %g and accepts no larger one", plan.Delta, pol.Budget.Delta)
	case plan.Clip > pol.MaxClip:
		return refuse("clip", "asks for clip C = %g; this client accepts C ≤ %g", plan.Clip, pol.MaxClip)
	case plan.SamplingRate > pol.MaxSamplingRate:
		return refuse("sampling rate", "asks for sampling rate q = %g; this client accepts q ≤ %g", plan.SamplingRate, pol.MaxSamplingRate)
	case plan.Threshold < pol.MinHonest+pol.MaxColluders:
		return refuse("threshold", "unmasks sums of %d clients; this client needs at least %d honest clients' noise besides up to %d colluders, so a threshold of at least %d",
			plan.Threshold, pol.MinHonest, pol.MaxColluders, pol.MinHonest+pol.MaxColluders)
	case plan.WrapProb > wrap:
		return refuse("wrap probability", "accepts a wrap probability of %g; this client accepts at most %g", plan.WrapProb, wrap)
	}
	need, err := RequiredNoise(pol, plan)
	if err != nil {
		return refuse("noise", "cannot be calibrated for this client's budget: %v", err)
	}
	if plan.Noise < need {
		return refuse("noise", "adds a noise share of σ = %d lattice units; this client's budget ε = %g over %d rounds with %d honest clients needs σ ≥ %d",
			plan.Noise, pol.Budget.Epsilon, pol.Rounds, pol.MinHonest, need)
	}
	return nil
}

// ChargeEvent is what a client charges its ledger for one round of plan,
// after CheckPlan accepted it: the plan's mechanism with the policy's own
// T honest clients, at the plan's noise (at least the policy's required
// share), labelled with its trust assumption.
func ChargeEvent(pol Policy, plan Plan) (dp.Event, error) {
	if err := CheckPlan(pol, plan); err != nil {
		return dp.Event{}, err
	}
	return plan.Mechanism(pol.MinHonest).Event(1)
}

// Accepted is a plan a client's policy accepted (Accept), with the event
// each round of it charges.
type Accepted struct {
	pol  Policy
	plan Plan
	ev   dp.Event
}

// Accept checks plan against the client's policy (CheckPlan) and returns
// it with its per-round charge (ChargeEvent), for a client that runs many
// rounds of one plan.
func Accept(pol Policy, plan Plan) (*Accepted, error) {
	ev, err := ChargeEvent(pol, plan)
	if err != nil {
		return nil, err
	}
	return &Accepted{pol: pol, plan: plan, ev: ev}, nil
}

// Plan is the accepted plan.
func (a *Accepted) Plan() Plan { return a.plan }

// Event is the charge of one round.
func (a *Accepted) Event() dp.Event { return a.ev }

// Charge is a client's accounting of one round of the accepted plan: it
// charges the round's mechanism to the ledger of set in store for members
// (nil: every member), its label naming the mechanism and the trust
// assumption; the ledger gets the policy's budget if it has none yet. A
// round that would take a member past the budget is refused and leaves the
// ledger file as it was (dp.ErrBudgetExceeded). Call it before the data
// are touched.
func (a *Accepted) Charge(store dp.DataLedgerStore, set dp.DataSet, members []string, label string) (dp.MemberSpent, error) {
	if set.Unit != a.pol.Unit {
		return dp.MemberSpent{}, refuse("privacy unit", "would charge a ledger per %s; this client protects %q", set.Unit, a.pol.Unit)
	}
	var spent dp.MemberSpent
	_, err := store.Update(set, func(l *dp.DataLedger) error {
		if _, ok := l.Budget(); !ok {
			if err := l.SetBudget(a.pol.Budget); err != nil {
				return err
			}
		}
		var err error
		spent, err = l.Charge(dp.Charge{Label: label + ": " + a.ev.Label, Members: members, Events: []dp.Event{a.ev}})
		return err
	})
	if err != nil {
		return dp.MemberSpent{}, fmt.Errorf("ddp: %w", err)
	}
	return spent, nil
}
