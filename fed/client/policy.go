package client

import (
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
)

// Policy is the client owner's differential-privacy policy. The owner
// sets it, not the coordinator: before the client plans, charges or
// touches its data in a round it checks the round's task against the
// policy, then the DP-SGD its trainer plans to run, and it refuses (a
// *PolicyError, ErrPolicy) a round outside it, leaving its ledger and
// every file in its folder as they were. Nothing a coordinator sends can
// make the client train without DP, per another unit, with less noise, a
// larger clip or sampling rate, or account at a larger δ than the policy
// allows; how many steps and rounds it may run is bounded by the budget,
// which the client's own ledger enforces.
type Policy struct {
	// Unit is what the budget protects: "identity" (all of one person's
	// images) or "example" (one image). A round must use this unit.
	Unit string
	// Budget is the client's total ε over every round, and the δ of its
	// accounting; a round may not ask for a larger δ.
	Budget dp.Budget
	// MinNoiseMultiplier is the least DP-SGD noise multiplier σ the client
	// runs: each step's noise has standard deviation σ·C, C the clip. A
	// round asking for less is refused; a trainer calibrating its own σ to
	// the budget runs at least this. 0 sets no floor beyond the budget.
	MinNoiseMultiplier float64
	// MaxClip is the largest clipping norm C the client accepts.
	MaxClip float64
	// MaxSamplingRate is the largest per-step sampling rate q of privacy
	// units the client accepts, in (0, 1]. The ledger charges whatever q a
	// round runs; a lower cap refuses rounds whose batch would sample more
	// of the client's units per step.
	MaxSamplingRate float64
	// DDP is the owner's policy for distributed DP-SGD rounds (package
	// fed/ddp); its zero value takes part in none.
	DDP DDPPolicy
	// AllowNoDP lets the client take part in rounds without DP, which give
	// its data no privacy guarantee (non-private baselines such as veil fed
	// sim --no-dp). Off by default: such a round is refused.
	AllowNoDP bool
	// SecAgg is what the owner requires of secure aggregation.
	SecAgg SecAggPolicy
}

// SecAggPolicy is the owner's policy on secure aggregation.
type SecAggPolicy struct {
	// Require refuses every round that is not securely aggregated (the
	// coordinator would see this client's update in plaintext).
	Require bool
	// MinHonest is T, the least number of honest, surviving clients the
	// owner assumes in a secure round (at least 2 when Require is set or
	// distributed DP is on; 0 takes part only in rounds whose threshold
	// is at least 2): a round whose threshold t is below T (plus
	// DDP.MaxColluders under distributed DP) is refused, and the client's
	// noise share is worked out from this T (NoiseShare, and
	// ddp.RequiredNoise under distributed DP), never from what the
	// coordinator says. It is the owner's one T: distributed DP-SGD
	// (DDP, Distributed) trusts the same number of honest clients.
	MinHonest int
	// MinBits is the smallest modulus, in bits, the client accepts (0:
	// 16): fewer bits make the sum wrap sooner.
	MinBits int
	// NoiseMultiplier is z, the distributed noise the owner wants the sum
	// of T honest clients to carry, relative to the round's quantisation
	// clip (NoiseShare). 0 adds none of the client's own: today the
	// client's local DP-SGD noise (MinNoiseMultiplier) carries its
	// guarantee and is what its ledger is charged; the distributed DP-SGD
	// work sets this and charges the distributed mechanism.
	NoiseMultiplier float64
	// SparseGraphs accepts masking rounds whose protection of this
	// client depends on the communication graph's seed: a sparse graph
	// (SecAgg+'s k < n − 1) on which the n − T clients that may collude
	// could surround this client (masking.Params.SeedIndependent). The
	// seed is the coordinator's: one that controls some clients could try
	// seeds until this client's neighbours are all its own (see
	// fed/secround's package comment). Off (the default), such a round is
	// refused (SettingGraph); the complete graph, and a sparse graph that
	// tolerates n − T colluders anywhere, are accepted.
	SparseGraphs bool
}

// DDPPolicy is what the owner plans for distributed DP-SGD: rounds of one
// DP-SGD step whose noise is the sum of the clients' shares under secure
// aggregation (package fed/ddp). The honest clients it trusts are the
// owner's one T, SecAgg.MinHonest: every unmasked sum holds at least T
// honest clients' noise shares, and the client's share is calibrated so
// that T of them give its budget over Rounds rounds. Without it (Rounds
// 0) the client's own noise is all of its protection (local DP), which
// assumes nothing of other clients.
type DDPPolicy struct {
	// MaxColluders is how many clients of a round the owner assumes may
	// collude with the coordinator and add no noise: a distributed round
	// must unmask no sum of fewer than MinHonest + MaxColluders clients.
	MaxColluders int
	// Rounds is how many rounds the client calibrates its required noise
	// share for (its whole budget over that many rounds; its ledger refuses
	// rounds beyond the budget). 0 takes part in no distributed round.
	Rounds int
	// MaxWrapProb caps the probability that a round's sum wraps modulo
	// 2^b (accuracy only; 0: ddp.DefaultMaxWrapProb).
	MaxWrapProb float64
}

// Defaults of a policy (DefaultPolicy).
const (
	// DefaultUnit protects all of a person's images together.
	DefaultUnit = "identity"
	// DefaultMinNoiseMultiplier is σ = 1: each step's noise is at least
	// as large (one standard deviation) as one unit's clipped contribution.
	DefaultMinNoiseMultiplier = 1.0
	// DefaultMaxClip is the clip every Veil command uses by default.
	DefaultMaxClip = 1.0
	// DefaultMaxSamplingRate accepts any q: the ledger charges what a round
	// runs, and a client with fewer people than the batch runs at q = 1.
	DefaultMaxSamplingRate = 1.0
)

// DefaultPolicy is the policy with budget b and the defaults: unit
// identity, σ ≥ 1, clip ≤ 1, any sampling rate, and no round without DP.
func DefaultPolicy(b dp.Budget) Policy {
	return Policy{Unit: DefaultUnit, Budget: b, MinNoiseMultiplier: DefaultMinNoiseMultiplier, MaxClip: DefaultMaxClip,
		MaxSamplingRate: DefaultMaxSamplingRate}
}

// Validate checks every setting.
func (p Policy) Validate() error {
	if err := p.Budget.Validate(); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	switch {
	case p.Unit != "identity" && p.Unit != "example":
		return fmt.Errorf("policy: privacy unit %q (want identity or example)", p.Unit)
	case !(p.MinNoiseMultiplier >= 0) || math.IsInf(p.MinNoiseMultiplier, 0):
		return fmt.Errorf("policy: the least noise multiplier must be a finite number ≥ 0, got %g", p.MinNoiseMultiplier)
	case !(p.MaxClip > 0) || math.IsInf(p.MaxClip, 0):
		return fmt.Errorf("policy: the largest clip must be positive and finite, got %g", p.MaxClip)
	case !(p.MaxSamplingRate > 0 && p.MaxSamplingRate <= 1):
		return fmt.Errorf("policy: the largest sampling rate must be in (0, 1], got %g", p.MaxSamplingRate)
	case p.SecAgg.MinHonest < 0 || p.SecAgg.MinHonest == 1 || ((p.SecAgg.Require || p.DDP.Rounds > 0) && p.SecAgg.MinHonest < 2):
		return fmt.Errorf("policy: the minimum honest clients of secure aggregation must be at least 2 (or 0 when neither required nor trusted by distributed DP), got %d", p.SecAgg.MinHonest)
	case p.SecAgg.MinBits != 0 && (p.SecAgg.MinBits < 8 || p.SecAgg.MinBits > 32):
		return fmt.Errorf("policy: the smallest secure aggregation modulus must be 8 to 32 bits, got %d", p.SecAgg.MinBits)
	case !(p.SecAgg.NoiseMultiplier >= 0) || math.IsInf(p.SecAgg.NoiseMultiplier, 0):
		return fmt.Errorf("policy: the distributed noise multiplier must be a finite number ≥ 0, got %g", p.SecAgg.NoiseMultiplier)
	}
	d := p.DDP
	switch {
	case d.MaxColluders < 0 || d.Rounds < 0:
		return fmt.Errorf("policy: distributed DP's colluders and rounds must not be negative, got %d and %d", d.MaxColluders, d.Rounds)
	case d.Rounds == 0 && (d.MaxColluders > 0 || d.MaxWrapProb != 0):
		return errors.New("policy: distributed DP settings (colluders, wrap probability) need the rounds its noise share is calibrated for (DDP.Rounds)")
	case !(d.MaxWrapProb >= 0 && d.MaxWrapProb < 1):
		return fmt.Errorf("policy: distributed DP's largest wrap probability must be in [0, 1), got %g", d.MaxWrapProb)
	}
	return nil
}

// Distributed returns the policy for distributed DP-SGD rounds (package
// fed/ddp), with the owner's one T (SecAgg.MinHonest), or an error when
// the owner set none (DDP.Rounds 0). The
// client's round handling checks a distributed round's plan with
// ddp.CheckPlan(p.Distributed(), plan) before it plans, charges or touches
// its data, and charges ddp.Accept's event.
func (p Policy) Distributed() (ddp.Policy, error) {
	if err := p.Validate(); err != nil {
		return ddp.Policy{}, err
	}
	d := p.DDP
	if d.Rounds == 0 {
		return ddp.Policy{}, errors.New("policy: this client takes part in no distributed DP round: its owner set no rounds to calibrate a noise share for (DDP.Rounds 0)")
	}
	return ddp.Policy{Unit: p.Unit, Budget: p.Budget, MaxClip: p.MaxClip, MaxSamplingRate: p.MaxSamplingRate,
		MinHonest: p.SecAgg.MinHonest, MaxColluders: d.MaxColluders, Rounds: d.Rounds, MaxWrapProb: d.MaxWrapProb}, nil
}

// ErrPolicy is what a round outside the client's policy is refused with
// (wrapped in a *PolicyError).
var ErrPolicy = errors.New("outside this client's privacy policy")

// Setting names the policy setting a round was refused for.
type Setting string

// The settings of a Policy.
const (
	SettingDP           Setting = "dp"
	SettingUnit         Setting = "privacy unit"
	SettingDelta        Setting = "delta"
	SettingNoise        Setting = "noise multiplier"
	SettingClip         Setting = "clip"
	SettingSamplingRate Setting = "sampling rate"
	SettingSteps        Setting = "steps"
	SettingSecAgg       Setting = "secagg"
	SettingThreshold    Setting = "secagg threshold"
	SettingBits         Setting = "secagg bits"
	SettingSecAggNoise  Setting = "secagg noise"
	SettingGraph        Setting = "secagg graph"
	// SettingDDP is a distributed DP-SGD round's plan (fed/ddp.CheckPlan
	// names the plan's setting in the message).
	SettingDDP Setting = "distributed dp"
)

// PolicyError is a round refused by the client's policy: which setting,
// and what the round (or the plan made for it) asked and the policy
// allows. It wraps ErrPolicy.
type PolicyError struct {
	Round   uint64
	Setting Setting
	// Msg says what was asked and what the policy allows.
	Msg string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("round %d %s", e.Round, e.Msg)
}

// Unwrap returns ErrPolicy.
func (e *PolicyError) Unwrap() error { return ErrPolicy }

func refuse(round uint64, s Setting, format string, a ...any) error {
	return &PolicyError{Round: round, Setting: s, Msg: fmt.Sprintf(format, a...)}
}

// CheckRound checks a round's task against p before anything is planned:
// DP on (unless AllowNoDP), the unit, δ, the noise multiplier the round
// fixes (0 leaves it to the client), the clip and a sampling rate the
// round states.
func (p Policy) CheckRound(task *fedpb.RoundConfig) error {
	n, d := task.GetRound(), task.GetDp()
	if err := p.checkSecAgg(task); err != nil {
		return err
	}
	if plan, ok := secround.PlanOf(task.GetSecagg()); ok {
		return p.checkDistributed(n, plan)
	}
	if d == nil {
		if p.AllowNoDP {
			return nil
		}
		return refuse(n, SettingDP, "asks for training without differential privacy; this client trains only under DP-SGD")
	}
	if err := p.check(n, "asks for", d); err != nil {
		return err
	}
	if s := d.GetNoiseMultiplier(); s != 0 && s < p.MinNoiseMultiplier {
		return refuse(n, SettingNoise, "asks for noise multiplier σ = %g; this client runs σ ≥ %g", s, p.MinNoiseMultiplier)
	}
	return nil
}

// CheckPlan checks the DP-SGD a trainer plans for round n against p: it
// is what the client charges and what the trainer must run.
func (p Policy) CheckPlan(n uint64, plan *fedpb.DPParams) error {
	if plan == nil {
		return refuse(n, SettingDP, "has a plan without differential privacy; this client trains only under DP-SGD")
	}
	if err := p.check(n, "is planned with", plan); err != nil {
		return err
	}
	switch s := plan.GetNoiseMultiplier(); {
	case !(s >= p.MinNoiseMultiplier) || !(s > 0) || math.IsInf(s, 0):
		return refuse(n, SettingNoise, "is planned with noise multiplier σ = %g; this client runs σ ≥ %g", s, math.Max(p.MinNoiseMultiplier, 0))
	case !(plan.GetSamplingRate() > 0):
		return refuse(n, SettingSamplingRate, "is planned with sampling rate q = %g; DP-SGD needs q in (0, 1]", plan.GetSamplingRate())
	case plan.GetSteps() < 1:
		return refuse(n, SettingSteps, "is planned with %d DP-SGD steps; at least one is needed", plan.GetSteps())
	}
	return nil
}

// check checks the settings a round and a plan share: unit, δ, clip and
// sampling rate (a round's 0 leaves it to the client).
func (p Policy) check(n uint64, verb string, d *fedpb.DPParams) error {
	switch {
	case d.GetPrivacyUnit() != p.Unit:
		return refuse(n, SettingUnit, "%s privacy unit %q; this client protects %q", verb, d.GetPrivacyUnit(), p.Unit)
	case !(d.GetDelta() > 0 && d.GetDelta() <= p.Budget.Delta):
		return refuse(n, SettingDelta, "%s δ = %g; this client accounts at δ = %g and accepts no larger one", verb, d.GetDelta(), p.Budget.Delta)
	case !(d.GetClip() > 0 && d.GetClip() <= p.MaxClip):
		return refuse(n, SettingClip, "%s clip C = %g; this client accepts C in (0, %g]", verb, d.GetClip(), p.MaxClip)
	case !(d.GetSamplingRate() >= 0 && d.GetSamplingRate() <= p.MaxSamplingRate):
		return refuse(n, SettingSamplingRate, "%s sampling rate q = %g; this client accepts q ≤ %g", verb, d.GetSamplingRate(), p.MaxSamplingRate)
	}
	return nil
}

// checkSecAgg checks a round's secure aggregation against p: present when
// the owner requires it; a known mode with a threshold t of at least the
// owner's T (SecAgg.MinHonest, at least 2, plus DDP.MaxColluders when the
// owner takes part in distributed DP) and a modulus of at least MinBits
// bits.
func (p Policy) checkSecAgg(task *fedpb.RoundConfig) error {
	n, sa := task.GetRound(), task.GetSecagg()
	if sa == nil {
		if p.SecAgg.Require {
			return refuse(n, SettingSecAgg, "is not securely aggregated (the coordinator would see this client's update); this client requires secure aggregation")
		}
		return nil
	}
	minBits := p.SecAgg.MinBits
	if minBits == 0 {
		minBits = 16
	}
	// The least sum unmasked: the owner's T, and under distributed DP
	// its T plus the colluders it allows for (fed/ddp).
	T := max(2, p.SecAgg.MinHonest)
	colluders := 0
	if p.DDP.Rounds > 0 {
		colluders = p.DDP.MaxColluders
	}
	least := T + colluders
	bits := int(sa.GetQuant().GetBits())
	if plan, ok := secround.PlanOf(sa); ok {
		bits = plan.Bits
	}
	switch t := int(sa.GetThreshold()); {
	case sa.GetMode() != "masking":
		return refuse(n, SettingSecAgg, "asks for secure aggregation mode %q; this client speaks masking", sa.GetMode())
	case t < least:
		return refuse(n, SettingThreshold, "asks for threshold t = %d; this client assumes at least T = %d honest clients besides %d colluders and needs t ≥ %d", t, T, colluders, least)
	case bits < minBits:
		return refuse(n, SettingBits, "asks for a modulus of 2^%d; this client accepts at least 2^%d", bits, minBits)
	}
	return nil
}

// NoiseShare is the discrete Gaussian σ, in lattice units of round cfg,
// this client adds to its quantised update: enough that the sum of any
// T of its owner's policy (MinHonest, at least 2) honest clients' shares
// carries noise of standard deviation σ_target = z·C (z the policy's
// SecAgg.NoiseMultiplier, C the round's quantisation clip), i.e.
// ⌈z·C/(γ·√T)⌉, and never less than the coordinator proposes. T comes
// from the policy, never from the coordinator or the roster's size.
//
// It is the one place the distributed noise is decided: the distributed
// DP-SGD work (its trainer and the charge of the distributed mechanism)
// replaces it with its own share and charge.
func (p Policy) NoiseShare(cfg *fedpb.SecAggConfig) (uint64, error) {
	q := cfg.GetQuant()
	T := max(2, p.SecAgg.MinHonest)
	if !(q.GetGamma() > 0) || !(q.GetClip() > 0) || math.IsInf(q.GetGamma(), 0) || math.IsInf(q.GetClip(), 0) {
		return 0, fmt.Errorf("the round's quantisation has clip %g and γ %g", q.GetClip(), q.GetGamma())
	}
	s := math.Ceil(p.SecAgg.NoiseMultiplier * q.GetClip() / (q.GetGamma() * math.Sqrt(float64(T))))
	if !(s <= 1<<31) {
		return 0, fmt.Errorf("a noise share of %g lattice units is beyond the quantiser's 2^31", s)
	}
	return max(uint64(s), q.GetNoise()), nil
}

// checkDistributed checks a distributed DP-SGD round's plan against the
// owner's own distributed policy (Distributed: its one T, colluders,
// rounds and budget) with ddp.CheckPlan: a client whose owner set none,
// or a plan outside it, refuses the round.
func (p Policy) checkDistributed(n uint64, plan ddp.Plan) error {
	pol, err := p.Distributed()
	if err != nil {
		return refuse(n, SettingDDP, "is a distributed DP-SGD round; %v", err)
	}
	if err := ddp.CheckPlan(pol, plan); err != nil {
		return refuse(n, SettingDDP, "is a distributed DP-SGD round whose plan this client refuses: %v", err)
	}
	return nil
}
