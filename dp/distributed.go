package dp

import (
	"fmt"
	"math"
)

// DistributedDiscreteGaussian is one release of the distributed discrete
// Gaussian mechanism (Kairouz, Liu & Steinke 2021, "The Distributed
// Discrete Gaussian Mechanism for Federated Learning with Secure
// Aggregation", arXiv 2102.06387): each client adds independent discrete
// Gaussian noise N_Z(0, Sigma²) per coordinate to its integer vector, and
// only the sum over the clients is released (secure aggregation).
//
// The charge is their Proposition 14 (the bound behind their Theorem 1):
// let σ ≥ 1/2, X_1, …, X_n independent, each N_Z(0, σ²)^d, and
// Z = X_1 + … + X_n. For every Δ ∈ Z^d and α ≥ 1,
//
//	D_α(Z ‖ Z + Δ) ≤ min{ α‖Δ‖₂²/(2nσ²) + τd,
//	                      (α/2)(‖Δ‖₂²/(nσ²) + 2‖Δ‖₁τ/(√n σ) + τ²d),
//	                      (α/2)(‖Δ‖₂/(√n σ) + τ√d)² },
//	τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1)).
//
// With n = 1 (τ = 0) this is the single discrete Gaussian's α‖Δ‖₂²/(2σ²)
// (Canonne, Kamath & Steinke 2020), and as σ grows τ → 0 and the bound
// tends to that of the continuous Gaussian of variance nσ².
//
// Assumptions, which the caller must make true:
//   - Clients is a number T of clients that are honest (they draw their
//     noise from a CSPRNG and add all of it) and whose inputs are in the
//     released sum: secure aggregation must refuse to unmask a sum of
//     fewer than T inputs. Noise of other clients can only help
//     (post-processing of a sum that already carries the honest noise,
//     since the dishonest noise is independent of it), so counting only T
//     is sound; a dishonest client may also add no noise at all.
//   - L2 and L1 bound ‖Δ‖₂ and ‖Δ‖₁ over every pair of neighbouring inputs
//     on the integer lattice, after quantisation (for one client's
//     contribution under add/remove-one-client adjacency: the rounded
//     vector's norm, e.g. the conditional randomised rounding bound of
//     secagg/quant).
//   - Dim is the dimension d in which the noise is added (after padding).
//   - The released value is a function of the integer sum Z + Σ inputs
//     (a sum modulo 2^b is: a wrap costs accuracy, never privacy).
type DistributedDiscreteGaussian struct {
	// Sigma is each client's discrete Gaussian parameter σ (lattice units),
	// at least 1/2.
	Sigma float64
	// Clients is n: the number of honest clients whose noise is in the sum.
	Clients int
	// L2 is the L2 sensitivity ‖Δ‖₂ on the lattice.
	L2 float64
	// L1 is the L1 sensitivity ‖Δ‖₁ on the lattice; 0 means the bound
	// min(√d·L2, L2²) that holds for every integer vector.
	L1 float64
	// Dim is the dimension d.
	Dim int
}

// Validate reports whether the parameters are within the theorem's
// hypotheses.
func (m DistributedDiscreteGaussian) Validate() error {
	if !(m.Sigma >= 0.5) || math.IsInf(m.Sigma, 0) {
		return fmt.Errorf("dp: distributed discrete Gaussian: σ must be finite and at least 1/2 (Proposition 14), got %g", m.Sigma)
	}
	if m.Clients < 1 {
		return fmt.Errorf("dp: distributed discrete Gaussian: the number of honest clients must be at least 1, got %d", m.Clients)
	}
	if !(m.L2 >= 0) || math.IsInf(m.L2, 0) || !(m.L1 >= 0) || math.IsInf(m.L1, 0) {
		return fmt.Errorf("dp: distributed discrete Gaussian: sensitivities must be finite and ≥ 0, got L2 %g, L1 %g", m.L2, m.L1)
	}
	if m.Dim < 1 {
		return fmt.Errorf("dp: distributed discrete Gaussian: the dimension must be at least 1, got %d", m.Dim)
	}
	return nil
}

// Tau returns τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1)), the distance of
// the sum of n discrete Gaussians from one discrete Gaussian.
func (m DistributedDiscreteGaussian) Tau() float64 {
	var tau float64
	for k := 1; k < m.Clients; k++ {
		tau += math.Exp(-2 * math.Pi * math.Pi * m.Sigma * m.Sigma * float64(k) / float64(k+1))
	}
	return 10 * tau
}

func (m DistributedDiscreteGaussian) l1() float64 {
	if m.L1 > 0 {
		return m.L1
	}
	return math.Min(math.Sqrt(float64(m.Dim))*m.L2, m.L2*m.L2)
}

// RDP returns the Rényi DP of one release at order α ≥ 1 (Proposition 14).
func (m DistributedDiscreteGaussian) RDP(alpha float64) (float64, error) {
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if !(alpha >= 1) || math.IsInf(alpha, 0) {
		return 0, fmt.Errorf("dp: distributed discrete Gaussian: the Rényi order must be finite and at least 1, got %g", alpha)
	}
	nv := float64(m.Clients) * m.Sigma * m.Sigma // nσ²
	sd := math.Sqrt(nv)                          // √n σ
	d := float64(m.Dim)
	tau := m.Tau()
	l2, l1 := m.L2, m.l1()
	b1 := alpha*l2*l2/(2*nv) + tau*d
	b2 := alpha / 2 * (l2*l2/nv + 2*l1*tau/sd + tau*tau*d)
	r := l2/sd + tau*math.Sqrt(d)
	b3 := alpha / 2 * r * r
	return math.Min(b1, math.Min(b2, b3)), nil
}

// Event returns the accountant event for rounds releases, as an RDP curve
// over orders (nil: DefaultOrders) labelled with label.
func (m DistributedDiscreteGaussian) Event(orders []float64, rounds int, label string) (Event, error) {
	if orders == nil {
		orders = DefaultOrders()
	}
	rdp := make([]float64, len(orders))
	for i, a := range orders {
		v, err := m.RDP(a)
		if err != nil {
			return Event{}, err
		}
		rdp[i] = v
	}
	e, err := RDPCurveEvent(orders, rdp, label)
	if err != nil {
		return Event{}, err
	}
	e.Count = rounds
	return e, e.Validate()
}

// Epsilon returns (ε, order) for rounds releases at δ, over orders (nil:
// DefaultOrders), with the conversion of RDPToDP.
func (m DistributedDiscreteGaussian) Epsilon(orders []float64, rounds int, delta float64) (eps, order float64, err error) {
	if orders == nil {
		orders = DefaultOrders()
	}
	if rounds < 1 {
		return 0, 0, fmt.Errorf("dp: distributed discrete Gaussian: the number of rounds must be at least 1, got %d", rounds)
	}
	rdp := make([]float64, len(orders))
	for i, a := range orders {
		v, err := m.RDP(a)
		if err != nil {
			return 0, 0, err
		}
		rdp[i] = v * float64(rounds)
	}
	return RDPToDP(orders, rdp, delta)
}
