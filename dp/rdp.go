package dp

import (
	"errors"
	"fmt"
	"math"
)

// DefaultOrders returns the Rényi orders of the accountants:
// 1.01, 1.02, …, 1.09 (large ε), 1.1, 1.2, …, 10.9 and 11, 12, …, 63 (the
// orders of Opacus and TF Privacy), then 64, 80, 96, 112, 128, 160, 192,
// 224, 256, 320, …, 4096 (four per octave, for small ε, as Google's
// accountant extends its grid with 128, 256, 512, 1024). With orders up
// to 4096 the conversion to (ε, δ) can certify any ε above 0.000536 at
// δ = 1e-5 (the conversion's value at order 4096 for zero Rényi DP,
// (ln(1/δ) − ln 4096)/4095 + ln(4095/4096)); at or below that no amount of
// noise helps (see EpsilonFloor).
func DefaultOrders() []float64 {
	orders := make([]float64, 0, 9+99+53+28)
	for x := 1; x < 10; x++ {
		orders = append(orders, 1+float64(x)/100)
	}
	for x := 1; x < 100; x++ {
		orders = append(orders, 1+float64(x)/10.0)
	}
	for a := 11; a < 64; a++ {
		orders = append(orders, float64(a))
	}
	for base := 64; base < 4096; base *= 2 {
		for k := range 4 {
			orders = append(orders, float64(base+k*base/4))
		}
	}
	return append(orders, 4096)
}

// EpsilonFloor returns the smallest ε the conversion RDPToDP can certify at
// δ over the given orders (nil: DefaultOrders) for a mechanism of zero
// Rényi DP, i.e. however much noise is added: min over α of
// −(ln δ + ln α)/(α − 1) + ln((α − 1)/α). Targets at or below it are
// unreachable with these orders.
func EpsilonFloor(orders []float64, delta float64) (float64, error) {
	if len(orders) == 0 {
		orders = DefaultOrders()
	}
	zero := make([]float64, len(orders))
	e, _, err := RDPToDP(orders, zero, delta)
	return e, err
}

// checkOrder validates a Rényi order α > 1.
func checkOrder(alpha float64) error {
	if math.IsNaN(alpha) || alpha <= 1 || math.IsInf(alpha, 0) {
		return fmt.Errorf("dp: Rényi order must be a finite number > 1, got %g", alpha)
	}
	return nil
}

// checkSamplingRate validates q in (0, 1].
func checkSamplingRate(q float64) error {
	if math.IsNaN(q) || q <= 0 || q > 1 {
		return fmt.Errorf("dp: the sampling rate must be in (0, 1] (the probability that an example takes part in a step), got %g", q)
	}
	return nil
}

// SubsampledGaussianRDP returns the Rényi DP at order α of one step of the
// Poisson-subsampled Gaussian mechanism with sampling rate q and noise
// multiplier σ (noise standard deviation over L2 sensitivity), by the
// bounds of Mironov, Talwar & Zhang (2019): the binomial expansion for
// integer α (Section 3.3) and the two-series expansion for fractional α
// (Section 3.4), the same computation as Opacus and TF Privacy.
func SubsampledGaussianRDP(q, sigma, alpha float64) (float64, error) {
	if err := checkSamplingRate(q); err != nil {
		return 0, err
	}
	if err := checkPositive("noise multiplier", sigma); err != nil {
		return 0, err
	}
	if err := checkOrder(alpha); err != nil {
		return 0, err
	}
	if q == 1 {
		return alpha / (2 * sigma * sigma), nil
	}
	if isIntOrder(alpha) {
		return intRDP(q, sigma, int(alpha)), nil
	}
	logA, err := logAFrac(q, sigma, alpha)
	if err != nil {
		return 0, err
	}
	// The two series of logAFrac cancel: when log A is tiny (large σ)
	// their difference carries an absolute error around 1e-11, which can
	// even make it negative (−2.7e-11 at order 1.1 for ε = 0.1). There the
	// convex interpolation between the neighbouring integer orders, which
	// is computed without cancellation and is a valid upper bound, is used
	// instead.
	if !(logA > 1e-8) {
		return interpolatedRDP(q, sigma, alpha), nil
	}
	return logA / (alpha - 1), nil
}

// isIntOrder reports whether α is an integer small enough for the
// binomial expansion.
func isIntOrder(alpha float64) bool { return alpha == math.Trunc(alpha) && alpha < 1<<20 }

// intRDP is the Rényi DP at integer order α ≥ 2 of the Poisson-subsampled
// Gaussian, log A_α/(α−1), clamped at 0 (A_α ≥ 1; the log-sum of terms
// adding up to about 1 can round a hair below).
func intRDP(q, sigma float64, alpha int) float64 {
	return math.Max(0, logAInt(q, sigma, alpha)/float64(alpha-1))
}

// interpolatedRDP bounds the Rényi DP at a fractional order α from the
// integer orders a = ⌊α⌋ and a+1: (α−1)·D_α is convex in α (it is the log
// of a moment generating function), so it lies below the chord between
// (a−1)·D_a and a·D_{a+1}, with (α−1)·D_α = 0 at α = 1.
func interpolatedRDP(q, sigma, alpha float64) float64 {
	a := math.Floor(alpha)
	gHi := a * intRDP(q, sigma, int(a)+1)
	var gLo float64
	if a >= 2 {
		gLo = (a - 1) * intRDP(q, sigma, int(a))
	}
	return ((a+1-alpha)*gLo + (alpha-a)*gHi) / (alpha - 1)
}

// SubsampledDiscreteGaussianRDP returns an upper bound on the Rényi DP at
// order α of one step of the Poisson-subsampled discrete Gaussian on the
// integer lattice Z^d with noise multiplier σ (parameter over integer L2
// sensitivity), for add/remove adjacency.
//
// The argument. Let μ0 = N_Z(0, s²I) and μ1 = N_Z(v, s²I) with v ∈ Z^d,
// ‖v‖₂ ≤ Δ, σ = s/Δ, and μ = (1−q)μ0 + qμ1.
//
// Removal, D_α(μ‖μ0), integer α: expanding (1 − q + q·μ1/μ0)^α gives
// Σ_k C(α,k)(1−q)^{α−k} q^k E_μ0[(μ1/μ0)^k], and
// E_μ0[(μ1/μ0)^k] = e^{(k²−k)‖v‖²/(2s²)}·Σ_x e^{−‖x−kv‖²/(2s²)}/Σ_x e^{−‖x‖²/(2s²)}
// where the last ratio is exactly 1 because kv is a lattice vector (shift
// invariance of the sum over Z^d). So the value is exactly the continuous
// sampled Gaussian's A_α of Mironov, Talwar & Zhang (2019), increasing in
// ‖v‖, hence maximal at ‖v‖ = Δ.
//
// Addition, D_α(μ0‖μ): the map x ↦ v − x swaps μ0 and μ1, so the privacy
// loss L = ln(μ1/μ0) under μ0 satisfies P(L = −ℓ) = e^ℓ·P(L = ℓ). Both
// E_μ0[(1−q+qe^L)^α] (removal) and E_μ0[(1−q+qe^L)^{1−α}] (addition) are
// linear in the law of L, and every such law is a mixture of the laws of
// randomized-response pairs (mass 1/(1+e^ℓ) at ℓ and e^ℓ/(1+e^ℓ) at −ℓ).
// For randomized response with r = e^ℓ > 1 and u = q(r−1), (1+r) times
// removal minus addition equals φ(1+b·t) − b·φ(1+t), where
// φ(x) = x^α − x^{1−α}, b = r − u ≥ 1 and t = u/b ≥ 0. That is ≥ 0
// because φ is convex on [1, ∞) for α > 1
// (its second derivative is α(α−1)(x^{α−2} − x^{−α−1}) ≥ 0) with φ(1) = 0, so
// φ(1+t) ≤ φ(1+b·t)/b. Hence addition
// never costs more than removal, at every real α > 1.
//
// Fractional α: (α−1)·D_α is convex in α, so the chord between the
// neighbouring integer orders bounds it (interpolatedRDP); the continuous
// Gaussian's fractional-order series does not carry over to the lattice.
// At q = 1 the value is α/(2σ²) (Canonne, Kamath & Steinke 2020, Thm 4).
//
// TestSubsampledDiscreteGaussianRDPExact checks both directions against
// exact sums over the lattice.
func SubsampledDiscreteGaussianRDP(q, sigma, alpha float64) (float64, error) {
	if err := checkSamplingRate(q); err != nil {
		return 0, err
	}
	if err := checkPositive("noise multiplier", sigma); err != nil {
		return 0, err
	}
	if err := checkOrder(alpha); err != nil {
		return 0, err
	}
	if q == 1 {
		return alpha / (2 * sigma * sigma), nil
	}
	if isIntOrder(alpha) {
		return intRDP(q, sigma, int(alpha)), nil
	}
	if alpha >= 1<<20 {
		return 0, fmt.Errorf("dp: Rényi order %g is too large for the discrete Gaussian bound (at most 2^20)", alpha)
	}
	return interpolatedRDP(q, sigma, alpha), nil
}

// logAInt computes log A_α for integer α:
// A_α = Σ_{i=0}^{α} C(α,i) (1−q)^{α−i} q^i exp((i²−i)/(2σ²)).
func logAInt(q, sigma float64, alpha int) float64 {
	// Log-sum-exp with a running maximum: terms are accumulated relative
	// to the largest so far, one exp per term. log C(α, i) is updated by
	// the recurrence C(α, i) = C(α, i−1)·(α−i+1)/i.
	lq, l1q := math.Log(q), math.Log1p(-q)
	fa := float64(alpha)
	mx, sum := math.Inf(-1), 0.0
	logC := 0.0
	for i := 0; i <= alpha; i++ {
		fi := float64(i)
		if i > 0 {
			logC += math.Log((fa - fi + 1) / fi)
		}
		t := logC + fi*lq + (fa-fi)*l1q + (fi*fi-fi)/(2*sigma*sigma)
		if t > mx {
			sum = sum*math.Exp(mx-t) + 1
			mx = t
		} else {
			sum += math.Exp(t - mx)
		}
	}
	return mx + math.Log(sum)
}

// logAFrac computes log A_α for fractional α by the two converging series
// of Mironov, Talwar & Zhang (2019), Section 3.4.
func logAFrac(q, sigma, alpha float64) (float64, error) {
	logA0, logA1 := math.Inf(-1), math.Inf(-1)
	z0 := sigma*sigma*math.Log(1/q-1) + 0.5
	lq, l1q := math.Log(q), math.Log1p(-q)
	logCoef, sign := 0.0, 1.0 // log|C(α, i)| and its sign, updated by recurrence
	for i := 0; ; i++ {
		fi := float64(i)
		if i > 0 {
			f := (alpha - fi + 1) / fi
			if f == 0 {
				break // integer α reached exactly; remaining terms vanish
			}
			if f < 0 {
				sign = -sign
			}
			logCoef += math.Log(math.Abs(f))
		}
		j := alpha - fi
		logT0 := logCoef + fi*lq + j*l1q
		logT1 := logCoef + j*lq + fi*l1q
		logE0 := math.Log(0.5) + logErfc((fi-z0)/(math.Sqrt2*sigma))
		logE1 := math.Log(0.5) + logErfc((z0-j)/(math.Sqrt2*sigma))
		logS0 := logT0 + (fi*fi-fi)/(2*sigma*sigma) + logE0
		logS1 := logT1 + (j*j-j)/(2*sigma*sigma) + logE1
		if sign > 0 {
			logA0 = logAdd(logA0, logS0)
			logA1 = logAdd(logA1, logS1)
		} else {
			logA0 = logSub(logA0, logS0)
			logA1 = logSub(logA1, logS1)
		}
		if math.Max(logS0, logS1) < -30 {
			break
		}
		if i > 1_000_000 {
			return 0, errors.New("dp: fractional-order RDP series did not converge")
		}
	}
	return logAdd(logA0, logA1), nil
}

// GaussianRDP returns the Rényi DP α/(2σ²) of the Gaussian mechanism with
// noise multiplier σ (standard deviation over L2 sensitivity).
func GaussianRDP(sigma, alpha float64) (float64, error) {
	if err := checkPositive("noise multiplier", sigma); err != nil {
		return 0, err
	}
	if err := checkOrder(alpha); err != nil {
		return 0, err
	}
	return alpha / (2 * sigma * sigma), nil
}

// LaplaceRDP returns the Rényi DP at order α of the Laplace mechanism with
// scale b = λ·Δ₁ (λ = scale over L1 sensitivity), Mironov (2017), Table II:
// 1/(α−1) · log( α/(2α−1)·e^{(α−1)/λ} + (α−1)/(2α−1)·e^{−α/λ} ).
func LaplaceRDP(lambda, alpha float64) (float64, error) {
	if err := checkPositive("Laplace scale over sensitivity", lambda); err != nil {
		return 0, err
	}
	if err := checkOrder(alpha); err != nil {
		return 0, err
	}
	a := math.Log(alpha/(2*alpha-1)) + (alpha-1)/lambda
	b := math.Log((alpha-1)/(2*alpha-1)) - alpha/lambda
	v := logAdd(a, b) / (alpha - 1)
	return math.Min(v, 1/lambda), nil
}

// PureDPRDP returns the Rényi DP at order α implied by ε-DP:
// min(ε, α·ε²/2) (Bun & Steinke 2016, Proposition 3.3, via zCDP).
func PureDPRDP(eps, alpha float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkOrder(alpha); err != nil {
		return 0, err
	}
	return math.Min(eps, alpha*eps*eps/2), nil
}

// RDPToDP converts a Rényi DP curve (values rdp at orders) to (ε, δ)-DP with
// the improved conversion used by Opacus (Balle et al. 2020, Theorem 21):
// ε = min over α of RDP(α) − (ln δ + ln α)/(α − 1) + ln((α − 1)/α).
// It returns ε and the minimising order.
func RDPToDP(orders, rdp []float64, delta float64) (eps, order float64, err error) {
	if err := checkDelta(delta); err != nil {
		return 0, 0, err
	}
	if len(orders) == 0 || len(orders) != len(rdp) {
		return 0, 0, fmt.Errorf("dp: RDP curve needs equal, non-zero numbers of orders and values, got %d and %d", len(orders), len(rdp))
	}
	best, bestOrder := math.Inf(1), math.NaN()
	for i, a := range orders {
		if err := checkOrder(a); err != nil {
			return 0, 0, err
		}
		r := rdp[i]
		if math.IsNaN(r) || r < 0 {
			return 0, 0, fmt.Errorf("dp: the Rényi DP at order %g must be a number ≥ 0, got %g", a, r)
		}
		e := r - (math.Log(delta)+math.Log(a))/(a-1) + math.Log((a-1)/a)
		if e < best {
			best, bestOrder = e, a
		}
	}
	if math.IsInf(best, 1) {
		return best, bestOrder, errors.New("dp: the privacy loss is unbounded at every Rényi order: no finite ε holds")
	}
	return math.Max(best, 0), bestOrder, nil
}
