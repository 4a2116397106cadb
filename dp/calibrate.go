package dp

import (
	"fmt"
	"math"
)

// ClassicGaussianSigma returns σ = Δ₂·√(2 ln(1.25/δ))/ε, the Gaussian
// mechanism bound of Dwork & Roth (Theorem A.1) used by the Irene
// (Algorithm 2) and PrivacyFace (Theorem 2) papers. The proof covers only
// ε < 1; for ε ≥ 1 the value is still returned (the papers use ε = 1) but is
// not a proven guarantee: prefer AnalyticGaussianSigma.
func ClassicGaussianSigma(sensitivity, eps, delta float64) (float64, error) {
	if err := checkGaussianArgs(sensitivity, eps, delta); err != nil {
		return 0, err
	}
	return sensitivity * math.Sqrt(2*math.Log(1.25/delta)) / eps, nil
}

// LaplaceScale returns b = Δ₁/ε, the scale of the ε-DP Laplace mechanism.
func LaplaceScale(sensitivity, eps float64) (float64, error) {
	if err := checkPositive("sensitivity", sensitivity); err != nil {
		return 0, err
	}
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	return sensitivity / eps, nil
}

// GaussianDelta returns the exact δ(ε) of the Gaussian mechanism with L2
// sensitivity Δ and noise σ (Balle & Wang 2018, Theorem 8):
// δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ).
func GaussianDelta(sensitivity, sigma, eps float64) (float64, error) {
	if err := checkPositive("sensitivity", sensitivity); err != nil {
		return 0, err
	}
	if err := checkPositive("sigma", sigma); err != nil {
		return 0, err
	}
	if err := checkFinite("epsilon", eps); err != nil {
		return 0, err
	}
	if eps < 0 {
		return 0, fmt.Errorf("dp: epsilon must be non-negative, got %g", eps)
	}
	return gaussianDeltaMu(sensitivity/sigma, eps), nil
}

// gaussianDeltaMu is δ(ε) of the Gaussian mechanism with μ = Δ/σ.
func gaussianDeltaMu(mu, eps float64) float64 {
	a := mu/2 - eps/mu
	b := -mu/2 - eps/mu
	d := normCDF(a) - math.Exp(eps+logNdtr(b))
	if d < 0 {
		return 0
	}
	return d
}

// AnalyticGaussianSigma returns the smallest σ for which the Gaussian
// mechanism with L2 sensitivity Δ is (ε, δ)-DP, by the exact condition of
// the analytic Gaussian mechanism (Balle & Wang 2018). Valid for every
// ε > 0 and never larger than ClassicGaussianSigma.
func AnalyticGaussianSigma(sensitivity, eps, delta float64) (float64, error) {
	if err := checkGaussianArgs(sensitivity, eps, delta); err != nil {
		return 0, err
	}
	// δ(ε) decreases as σ grows; bisect on σ/Δ.
	lo, hi := 1e-6, 1.0
	for gaussianDeltaMu(1/hi, eps) > delta {
		hi *= 2
		if hi > 1e12 {
			return 0, fmt.Errorf("dp: analytic Gaussian: no noise level reaches delta=%g at epsilon=%g", delta, eps)
		}
	}
	for range 200 {
		mid := (lo + hi) / 2
		if gaussianDeltaMu(1/mid, eps) > delta {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo <= 1e-12*hi {
			break
		}
	}
	return hi * sensitivity, nil
}

// checkGaussianArgs validates the sensitivity, ε and δ of a Gaussian
// calibration.
func checkGaussianArgs(sensitivity, eps, delta float64) error {
	if err := checkPositive("sensitivity", sensitivity); err != nil {
		return err
	}
	if err := checkEpsilon(eps); err != nil {
		return err
	}
	return checkDelta(delta)
}
