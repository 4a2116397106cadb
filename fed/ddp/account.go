package ddp

import (
	"fmt"
	"math"
	"slices"

	"github.com/veil-privacy/veil/dp"
)

// Mechanism is one round of distributed DP-SGD as the accountant sees it:
// the Poisson-subsampled distributed discrete Gaussian. Each unit is
// sampled with probability SamplingRate; the released integer sum carries
// the noise of at least Honest clients, each N_Z(0, Noise²) per
// coordinate, in Dim coordinates; one unit moves the integer sum by a
// vector of L2 norm at most L2 (package documentation, step 3).
type Mechanism struct {
	// SamplingRate is q, the Poisson rate of each unit, in (0, 1].
	SamplingRate float64
	// Noise is σ, each honest client's discrete Gaussian parameter, in
	// lattice units (≥ 1).
	Noise uint64
	// Honest is T, the least number of honest clients whose noise is in
	// every unmasked sum.
	Honest int
	// L2 is the L2 sensitivity on the lattice: C/γ + √D'.
	L2 float64
	// Dim is D', the number of noised coordinates.
	Dim int
}

// Validate checks the parameters.
func (m Mechanism) Validate() error {
	switch {
	case !(m.SamplingRate > 0 && m.SamplingRate <= 1):
		return fmt.Errorf("ddp: the sampling rate must be in (0, 1], got %g", m.SamplingRate)
	case m.Noise < 1 || m.Noise > 1<<31:
		return fmt.Errorf("ddp: the noise parameter must be in [1, 2^31] lattice units, got %d", m.Noise)
	case m.Honest < 1:
		return fmt.Errorf("ddp: at least one honest client's noise must be in the sum, got %d", m.Honest)
	case !(m.L2 > 0) || math.IsInf(m.L2, 0):
		return fmt.Errorf("ddp: the L2 sensitivity must be positive and finite, got %g", m.L2)
	case m.Dim < 1:
		return fmt.Errorf("ddp: the dimension must be positive, got %d", m.Dim)
	}
	return nil
}

// unsampled is the distributed discrete Gaussian of one round without
// subsampling (Kairouz, Liu & Steinke 2021, Proposition 14).
func (m Mechanism) unsampled() dp.DistributedDiscreteGaussian {
	return dp.DistributedDiscreteGaussian{Sigma: float64(m.Noise), Clients: m.Honest, L2: m.L2, Dim: m.Dim}
}

// EffectiveMultiplier is √T·σ/L2: the noise multiplier of the one
// discrete Gaussian the T honest shares add up to when τ → 0.
func (m Mechanism) EffectiveMultiplier() float64 {
	return math.Sqrt(float64(m.Honest)) * float64(m.Noise) / m.L2
}

// logMoment returns log A_α for integer α ≥ 2,
//
//	A_α = Σ_{k=0}^{α} C(α,k)(1−q)^{α−k} q^k e^{(k−1)·ε(k)},
//
// with ε(0)·(−1) = ε(1)·0 = 0 (the k = 0 and 1 moments are exactly 1) and
// ε(k) the unsampled mechanism's RDP at order k (package documentation,
// step 4).
func (m Mechanism) logMoment(alpha int) (float64, error) {
	u := m.unsampled()
	q := m.SamplingRate
	lq, l1q := math.Log(q), math.Log1p(-q)
	if q == 1 {
		l1q = math.Inf(-1)
	}
	mx, sum := math.Inf(-1), 0.0
	logC := 0.0
	for k := 0; k <= alpha; k++ {
		if k > 0 {
			logC += math.Log(float64(alpha-k+1)) - math.Log(float64(k))
		}
		var moment float64 // (k−1)·ε(k), the log of E[(μ1/μ0)^k]
		if k >= 2 {
			e, err := u.RDP(float64(k))
			if err != nil {
				return 0, err
			}
			moment = float64(k-1) * e
		}
		t := logC + moment
		if k > 0 {
			t += float64(k) * lq
		}
		if k < alpha {
			t += float64(alpha-k) * l1q
		}
		if math.IsInf(t, -1) {
			continue
		}
		if t > mx {
			sum = sum*math.Exp(mx-t) + 1
			mx = t
		} else {
			sum += math.Exp(t - mx)
		}
	}
	return mx + math.Log(sum), nil
}

// intRDP is the RDP at integer order α ≥ 2: log A_α/(α−1), never below 0
// and never above the unsampled mechanism's.
func (m Mechanism) intRDP(alpha int) (float64, error) {
	la, err := m.logMoment(alpha)
	if err != nil {
		return 0, err
	}
	full, err := m.unsampled().RDP(float64(alpha))
	if err != nil {
		return 0, err
	}
	return math.Min(full, math.Max(0, la/float64(alpha-1))), nil
}

// maxOrder bounds the orders RDP evaluates (each costs α terms).
const maxOrder = 1 << 16

// RDP returns an upper bound on the Rényi DP at order α > 1 of one round,
// for add/remove adjacency of one unit (package documentation, step 4):
// at integer orders the binomial expansion of the removal direction with
// the unsampled mechanism's moments; at fractional orders the chord
// between the neighbouring integer orders ((α−1)·D_α is convex in α).
func (m Mechanism) RDP(alpha float64) (float64, error) {
	return m.rdp(alpha, map[int]float64{})
}

// rdp is RDP with a memo of the integer orders' values.
func (m Mechanism) rdp(alpha float64, memo map[int]float64) (float64, error) {
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if math.IsNaN(alpha) || alpha <= 1 || alpha > maxOrder {
		return 0, fmt.Errorf("ddp: the Rényi order must be in (1, %d], got %g", maxOrder, alpha)
	}
	at := func(a int) (float64, error) {
		if v, ok := memo[a]; ok {
			return v, nil
		}
		v, err := m.intRDP(a)
		memo[a] = v
		return v, err
	}
	if alpha == math.Trunc(alpha) {
		return at(int(alpha))
	}
	a := math.Floor(alpha)
	hi, err := at(int(a) + 1)
	if err != nil {
		return 0, err
	}
	gHi := a * hi
	var gLo float64
	if a >= 2 {
		lo, err := at(int(a))
		if err != nil {
			return 0, err
		}
		gLo = (a - 1) * lo
	}
	full, err := m.unsampled().RDP(alpha)
	if err != nil {
		return 0, err
	}
	return math.Min(full, ((a+1-alpha)*gLo+(alpha-a)*gHi)/(alpha-1)), nil
}

// Curve returns the RDP of one round at orders (nil: dp.DefaultOrders()).
func (m Mechanism) Curve(orders []float64) (ords, rdp []float64, err error) {
	if orders == nil {
		orders = dp.DefaultOrders()
	}
	ords = slices.Clone(orders)
	rdp = make([]float64, len(ords))
	memo := map[int]float64{}
	for i, a := range ords {
		if rdp[i], err = m.rdp(a, memo); err != nil {
			return nil, nil, err
		}
	}
	return ords, rdp, nil
}

// Event returns the ledger event of rounds rounds: the RDP curve over
// dp.DefaultOrders() times rounds, labelled with the mechanism and its
// trust assumption (Assumption).
func (m Mechanism) Event(rounds int) (dp.Event, error) {
	if rounds < 1 {
		return dp.Event{}, fmt.Errorf("ddp: the number of rounds must be at least 1, got %d", rounds)
	}
	ords, rdp, err := m.Curve(nil)
	if err != nil {
		return dp.Event{}, err
	}
	ev, err := dp.RDPCurveEvent(ords, rdp, m.Label())
	if err != nil {
		return dp.Event{}, err
	}
	ev.Count = rounds
	return ev, ev.Validate()
}

// Label names the mechanism and its trust assumption, for ledgers and
// records.
func (m Mechanism) Label() string {
	return fmt.Sprintf("distributed DP-SGD (Poisson-subsampled distributed discrete Gaussian, q = %.6g, σ = %d lattice units, σ_eff = %.6g); %s",
		m.SamplingRate, m.Noise, m.EffectiveMultiplier(), Assumption(m.Honest))
}

// Assumption states, in words, what the ε of distributed DP-SGD assumes.
func Assumption(honest int) string {
	return fmt.Sprintf("assumes at least %d honest clients, each adding its noise share, among the surviving inputs of every unmasked sum (the coordinator colludes with none of those %d), and that secure aggregation reveals nothing but such sums", honest, honest)
}

// Epsilon returns ε at δ after rounds rounds, over dp.DefaultOrders().
func (m Mechanism) Epsilon(rounds int, delta float64) (float64, error) {
	ev, err := m.Event(rounds)
	if err != nil {
		return 0, err
	}
	a, err := dp.NewAccountant(nil)
	if err != nil {
		return 0, err
	}
	if err := a.Add(ev); err != nil {
		return 0, err
	}
	eps, _, err := a.Epsilon(delta)
	return eps, err
}
