package dp

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/cmplx"
)

// ErrPLDTooLarge is returned (wrapped) when the privacy loss distribution
// would need more grid points than PLDOptions.MaxSize allows: a coarser
// Interval, or the RDP accountant, is the remedy.
var ErrPLDTooLarge = errors.New("the privacy loss distribution is too large for the chosen discretisation interval")

// ErrPLDTailMass is returned (wrapped) when the probability mass the PLD
// accountant cuts from the tails already exceeds δ: a smaller
// PLDOptions.TailMass, or the RDP accountant, is the remedy.
var ErrPLDTailMass = errors.New("the privacy loss distribution's truncated tails already exceed δ")

// PLDOptions configures the privacy-loss-distribution accountant.
type PLDOptions struct {
	// Interval is the width h of the privacy-loss grid; 0 means 1e-4.
	Interval float64 `json:"interval,omitempty"`
	// TailMass is the probability mass cut from each tail of one step's
	// noise distribution; the upper cut is charged as infinite loss
	// (added to δ), the lower cut is rounded up. 0 means 1e-15.
	TailMass float64 `json:"tail_mass,omitempty"`
	// MaxSize bounds the FFT length; 0 means 1<<24.
	MaxSize int `json:"max_size,omitempty"`
}

func (o PLDOptions) withDefaults() (PLDOptions, error) {
	if o.Interval == 0 {
		o.Interval = 1e-4
	}
	if o.TailMass == 0 {
		o.TailMass = 1e-15
	}
	if o.MaxSize == 0 {
		o.MaxSize = 1 << 24
	}
	if math.IsNaN(o.Interval) || o.Interval <= 0 || o.Interval > 1 {
		return o, fmt.Errorf("dp: the PLD discretisation interval must be in (0, 1], got %g", o.Interval)
	}
	if math.IsNaN(o.TailMass) || o.TailMass <= 0 || o.TailMass > 1e-3 {
		return o, fmt.Errorf("dp: the PLD tail mass must be in (0, 1e-3], got %g", o.TailMass)
	}
	if o.MaxSize < 1024 {
		return o, fmt.Errorf("dp: the PLD size limit must be at least 1024, got %d", o.MaxSize)
	}
	return o, nil
}

// stepPMF is the pessimistically discretised privacy-loss distribution of
// one mechanism step: probs[i] is the mass at loss (kmin+i)·h, inf the
// mass at +∞.
type stepPMF struct {
	kmin  int
	probs []float64
	inf   float64
	count int
}

// pldComposed is a composed PLD: mass at loss (base+i)·h, plus mass at +∞.
type pldComposed struct {
	h     float64
	base  int
	probs []float64
	inf   float64
}

// subsampledGaussianPMF discretises the privacy loss of one step of the
// Poisson-subsampled Gaussian (q, σ) for one adjacency direction: remove
// (P = (1−q)N(0,σ²)+qN(1,σ²) against Q = N(0,σ²)) or add (Q against P).
// It uses the pessimistic "connect-the-dots" discretisation of Doroshenko
// et al. (2022): the grid PMF reproduces the exact hockey-stick divergence
// δ(ε) at every grid point ε_j = j·h and interpolates between them from
// above, so it dominates the mechanism without the bias of rounding every
// loss up (which would add up to h per composed step).
func subsampledGaussianPMF(q, sigma float64, remove bool, o PLDOptions) (stepPMF, error) {
	h := o.Interval
	s2 := sigma * sigma
	// lossA is log P(x)/Q(x), increasing in x; xOf is its inverse.
	lossA := func(x float64) float64 {
		if q == 1 {
			return (2*x - 1) / (2 * s2)
		}
		return logAdd(math.Log1p(-q), math.Log(q)+(2*x-1)/(2*s2))
	}
	xOf := func(y float64) float64 {
		v := math.Expm1(y) + q
		if v <= 0 {
			return math.Inf(-1)
		}
		return s2*(math.Log(v)-math.Log(q)) + 0.5
	}
	cdfP := func(x float64) float64 { return (1-q)*normCDF(x/sigma) + q*normCDF((x-1)/sigma) }
	sfP := func(x float64) float64 { return (1-q)*normSF(x/sigma) + q*normSF((x-1)/sigma) }
	cdfQ := func(x float64) float64 { return normCDF(x / sigma) }
	sfQ := func(x float64) float64 { return normSF(x / sigma) }
	// hockey is the exact δ(ε) of one step in this direction.
	var hockey func(eps float64) float64
	z := -normQuantileLower(o.TailMass / 2)
	var ylo, yhi float64
	if remove {
		hockey = func(eps float64) float64 {
			x := xOf(eps)
			if math.IsInf(x, -1) {
				return -math.Expm1(eps)
			}
			return math.Max(0, sfP(x)-math.Exp(eps)*sfQ(x))
		}
		ylo, yhi = lossA(-z*sigma), lossA(1+z*sigma)
	} else {
		hockey = func(eps float64) float64 {
			x := xOf(-eps)
			if math.IsInf(x, -1) {
				return 0
			}
			return math.Max(0, cdfQ(x)-math.Exp(eps)*cdfP(x))
		}
		ylo, yhi = -lossA(z*sigma), -lossA(-z*sigma)
	}
	jmin := int(math.Floor(ylo / h))
	jmax := int(math.Ceil(yhi / h))
	if jmax-jmin > o.MaxSize {
		return stepPMF{}, fmt.Errorf("dp: %w: one step needs %d points at interval %g, above the limit %d (use a coarser interval, or the RDP accountant)", ErrPLDTooLarge, jmax-jmin, h, o.MaxSize)
	}
	n := jmax - jmin + 1
	probs := make([]float64, n)
	// Solve top-down: δ(ε_j) = ω_∞ + Σ_{i>j} ω_i (1 − e^{ε_j−ε_i}).
	// With B_j = Σ_{i>j} ω_i e^{ε_j−ε_i}:
	// ω_j = (δ_{j−1} − δ_j − B_j (1 − e^{−h})) / (1 − e^{−h}).
	inf := hockey(float64(jmax) * h)
	one := -math.Expm1(-h)
	dNext := inf
	var B, total float64 // B = Σ_{i>j} ω_i e^{ε_j−ε_i}, updated as j decreases
	for j := jmax; j > jmin; j-- {
		dPrev := hockey(float64(j-1) * h)
		w := (dPrev - dNext - B*one) / one
		if w < 0 || math.IsNaN(w) {
			w = 0
		}
		probs[j-jmin] = w
		total += w
		// Move to j−1: B_{j−1} = (B_j + ω_j)·e^{−h}.
		B = (B + w) * math.Exp(-h)
		dNext = dPrev
	}
	rest := 1 - inf - total
	if rest > 0 {
		probs[0] += rest
	}
	return stepPMF{kmin: jmin, probs: probs, inf: inf}, nil
}

// wrapTail bounds the composed probability mass outside the FFT window on
// each side.
const wrapTail = 1e-15

// chernoffHalfWidth returns, in grid units, a half-width a such that
// P(|Σ(K_i − shift_i)| ≥ a) ≤ wrapTail on each side, by the Chernoff bound
// min_λ E[e^{λX}]·e^{−λa} over λ = ±2^k (k = −2…14, in loss units).
func chernoffHalfWidth(steps []stepPMF, shifts []int, h float64) int {
	logTau := math.Log(wrapTail)
	logs := make([][]float64, len(steps))
	for i, s := range steps {
		logs[i] = make([]float64, len(s.probs))
		for j, v := range s.probs {
			logs[i][j] = math.Log(v) // -Inf for empty buckets
		}
	}
	bound := func(sign float64) float64 {
		best := math.Inf(1)
		for k := -2; k <= 14; k++ {
			lam := sign * math.Ldexp(1, k) * h // per grid unit
			var logMGF float64
			for i, s := range steps {
				mx := math.Inf(-1)
				for j, l := range logs[i] {
					mx = math.Max(mx, l+lam*float64(s.kmin+j-shifts[i]))
				}
				var sum float64
				for j, l := range logs[i] {
					sum += math.Exp(l + lam*float64(s.kmin+j-shifts[i]) - mx)
				}
				logMGF += float64(s.count) * (mx + math.Log(sum))
			}
			if a := (logMGF - logTau) / math.Abs(lam); a < best {
				best = a
			}
		}
		return best
	}
	a := math.Max(bound(1), bound(-1))
	if math.IsInf(a, 0) || math.IsNaN(a) || a > 1<<40 {
		return 1 << 40
	}
	return int(math.Ceil(a))
}

// normQuantileLower returns Φ⁻¹(p) for small p by bisection on logNdtr.
func normQuantileLower(p float64) float64 {
	lo, hi := -40.0, 0.0
	lp := math.Log(p)
	for range 200 {
		mid := (lo + hi) / 2
		if logNdtr(mid) < lp {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// composePLD composes the step PMFs (each raised to its count) by FFT.
func composePLD(steps []stepPMF, o PLDOptions) (pldComposed, error) {
	// Centre each step at its mean index so the composition is centred at 0.
	width := 0
	base := 0
	shifts := make([]int, len(steps))
	infKeep := 1.0
	for i, s := range steps {
		var m, tot float64
		for j, v := range s.probs {
			m += v * float64(s.kmin+j)
			tot += v
		}
		if tot <= 0 {
			return pldComposed{}, errors.New("dp: PLD step has no finite mass")
		}
		shifts[i] = int(math.Round(m / tot))
		base += s.count * shifts[i]
		width = max(width, len(s.probs))
		infKeep *= math.Pow(1-s.inf, float64(s.count))
	}
	// Window: Chernoff bounds on the centred composed loss from the exact
	// moment generating functions of the discretised steps, so the mass
	// beyond ±half (which the circular convolution would wrap around) is at
	// most wrapTail on each side; that mass is added to the infinity bucket.
	half := max(width, chernoffHalfWidth(steps, shifts, o.Interval)) + 64
	n := 1 << bits.Len(uint(2*half))
	if n > o.MaxSize {
		return pldComposed{}, fmt.Errorf("dp: %w: composing the steps needs %d points at interval %g, above the limit %d (use a coarser interval, or the RDP accountant)", ErrPLDTooLarge, n, o.Interval, o.MaxSize)
	}
	total := make([]complex128, n)
	for i := range total {
		total[i] = 1
	}
	buf := make([]complex128, n)
	plan := newFFTPlan(n)
	for i, s := range steps {
		clear(buf)
		for j, v := range s.probs {
			idx := (s.kmin + j - shifts[i]) % n
			if idx < 0 {
				idx += n
			}
			buf[idx] += complex(v, 0)
		}
		plan.transform(buf, false)
		c := complex(float64(s.count), 0)
		for k := range buf {
			if s.count == 1 {
				total[k] *= buf[k]
			} else if buf[k] != 0 {
				total[k] *= cmplx.Pow(buf[k], c)
			} else {
				total[k] = 0
			}
		}
	}
	plan.transform(total, true)
	out := pldComposed{h: o.Interval, base: base - n/2, probs: make([]float64, n), inf: math.Min(1, 1-infKeep+2*wrapTail)}
	// Unwrap: index j' in [−n/2, n/2) stored at out.probs[j'+n/2].
	for j := range n {
		jj := j
		if j >= n/2 {
			jj = j - n
		}
		out.probs[jj+n/2] = math.Max(0, real(total[j]))
	}
	return out, nil
}

// delta returns δ(ε) = P[∞] + Σ p_ℓ (1 − e^{ε−ℓ})₊ of the composed PLD.
func (c pldComposed) delta(eps float64) float64 {
	d := c.inf
	for i := len(c.probs) - 1; i >= 0; i-- {
		l := float64(c.base+i) * c.h
		if l <= eps {
			break
		}
		d += c.probs[i] * -math.Expm1(eps-l)
	}
	return math.Min(d, 1)
}

// epsilon returns the smallest ε ≥ 0 with δ(ε) ≤ delta.
func (c pldComposed) epsilon(delta float64) (float64, error) {
	if c.inf >= delta {
		return math.Inf(1), fmt.Errorf("dp: %w: %g is cut from the tails, δ = %g (use a smaller tail mass, or the RDP accountant)", ErrPLDTailMass, c.inf, delta)
	}
	if c.delta(0) <= delta {
		return 0, nil
	}
	// Scan from the top: on [ℓ_{m−1}, ℓ_m) δ(ε) = inf + A − e^ε·B.
	var A, B float64
	for m := len(c.probs) - 1; m >= 1; m-- {
		lm := float64(c.base+m) * c.h
		A += c.probs[m]
		B += c.probs[m] * math.Exp(-lm)
		lprev := float64(c.base+m-1) * c.h
		dprev := c.inf + A - math.Exp(lprev)*B
		if dprev > delta {
			e := math.Log((c.inf + A - delta) / B)
			return math.Max(e, math.Max(lprev, 0)), nil
		}
	}
	return 0, nil
}

// pldFor builds the composed PLD of events for one direction.
func pldFor(events []Event, remove bool, o PLDOptions) (pldComposed, error) {
	steps := make([]stepPMF, 0, len(events))
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return pldComposed{}, err
		}
		q := 1.0
		switch e.Kind {
		case KindSubsampledGaussian:
			q = e.SamplingRate
		case KindGaussian:
		default:
			return pldComposed{}, fmt.Errorf("dp: the PLD accountant composes only Gaussian mechanisms, not the %v", e.Kind)
		}
		s, err := subsampledGaussianPMF(q, e.NoiseMultiplier, remove, o)
		if err != nil {
			return pldComposed{}, err
		}
		s.count = e.Count
		steps = append(steps, s)
	}
	return composePLD(steps, o)
}

// PLDEpsilon returns ε at δ for the composition of Gaussian-family events
// (subsampled Gaussian, Gaussian) by the privacy loss distribution
// composed with FFT, taking the worse of the add and remove adjacency.
// The discretisation dominates each step (connect-the-dots), so the result
// is an upper bound up to the FFT's wrap-around, which the window (one
// step's support plus 30 standard deviations of the composed loss each
// side) makes negligible.
func PLDEpsilon(events []Event, delta float64, opts PLDOptions) (float64, error) {
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if len(events) == 0 {
		return 0, nil
	}
	o, err := opts.withDefaults()
	if err != nil {
		return 0, err
	}
	worst := 0.0
	for _, remove := range []bool{true, false} {
		c, err := pldFor(events, remove, o)
		if err != nil {
			return 0, err
		}
		e, err := c.epsilon(delta)
		if err != nil {
			return 0, err
		}
		worst = math.Max(worst, e)
	}
	return worst, nil
}

// PLDDelta returns δ at ε for the composition of Gaussian-family events by
// the PLD accountant (worse of add and remove adjacency).
func PLDDelta(events []Event, eps float64, opts PLDOptions) (float64, error) {
	if err := checkFinite("epsilon", eps); err != nil {
		return 0, err
	}
	if eps < 0 {
		return 0, fmt.Errorf("dp: epsilon must be non-negative, got %g", eps)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return 0, err
	}
	worst := 0.0
	for _, remove := range []bool{true, false} {
		c, err := pldFor(events, remove, o)
		if err != nil {
			return 0, err
		}
		worst = math.Max(worst, c.delta(eps))
	}
	return worst, nil
}
