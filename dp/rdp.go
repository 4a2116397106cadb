package dp

import (
	"errors"
	"fmt"
	"math"
)

// DefaultOrders returns the Rényi orders Opacus uses: 1.1, 1.2, …, 10.9 and
// 12, 13, …, 63.
func DefaultOrders() []float64 {
	orders := make([]float64, 0, 99+52)
	for x := 1; x < 100; x++ {
		orders = append(orders, 1+float64(x)/10.0)
	}
	for a := 12; a < 64; a++ {
		orders = append(orders, float64(a))
	}
	return orders
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
		return fmt.Errorf("dp: sampling rate must be in (0, 1], got %g", q)
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
	var logA float64
	if alpha == math.Trunc(alpha) && alpha < 1e6 {
		logA = logAInt(q, sigma, int(alpha))
	} else {
		var err error
		logA, err = logAFrac(q, sigma, alpha)
		if err != nil {
			return 0, err
		}
	}
	return logA / (alpha - 1), nil
}

// logAInt computes log A_α for integer α:
// A_α = Σ_{i=0}^{α} C(α,i) (1−q)^{α−i} q^i exp((i²−i)/(2σ²)).
func logAInt(q, sigma float64, alpha int) float64 {
	logA := math.Inf(-1)
	lq, l1q := math.Log(q), math.Log1p(-q)
	for i := 0; i <= alpha; i++ {
		fi := float64(i)
		s := logBinom(alpha, i) + fi*lq + float64(alpha-i)*l1q + (fi*fi-fi)/(2*sigma*sigma)
		logA = logAdd(logA, s)
	}
	return logA
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
			return 0, 0, fmt.Errorf("dp: RDP value at order %g is invalid: %g", a, r)
		}
		e := r - (math.Log(delta)+math.Log(a))/(a-1) + math.Log((a-1)/a)
		if e < best {
			best, bestOrder = e, a
		}
	}
	if math.IsInf(best, 1) {
		return best, bestOrder, fmt.Errorf("dp: privacy loss is unbounded at every order")
	}
	return math.Max(best, 0), bestOrder, nil
}
