// Package dplc implements differentially private local clustering (DPLC)
// after Algorithm 1 of PrivacyFace (Meng et al.), made differentially
// private end to end: it releases exactly K noisy, normalised centres of
// spherical caps of angular radius ρ over a client's class centres, and
// the whole release is (ε, δ)-DP for one stated (ε, δ). It also computes
// the occupancy ratio of Theorem 1.
//
// # Unit of privacy
//
// One class centre, that is one identity: two inputs are neighbours when
// one has a centre (a row) the other lacks. ε is in nats. Under the
// paper's replace-one adjacency (a centre changed) the guarantee holds for
// two add/remove steps (group privacy of size 2).
//
// # Why not Algorithm 1 as printed
//
// The paper proves Theorem 2 for the noisy mean of a given set S, but in
// Algorithm 1 S is the neighbourhood of the data point with the most
// neighbours (an exact count), σ ∝ 1/|S| is computed from private data
// without noise, the loop stops when |S| < T (so the number of released
// clusters reveals whether a T-th centre is present), and each cap's
// anchor is itself a private centre. None of these steps is private: adding
// one centre can change the number of clusters, every σ and which region
// is clustered. The charge (Qε, Qδ) covered only the final Gaussian draws.
//
// # The mechanism
//
// Inputs: n class centres w_i (each normalised to unit length, a per-row
// map), public parameters ρ, K, b, (ε, δ), and noise multipliers m₀ and m
// derived from (ε, δ) alone (never from the data).
//
//  1. Public partition. Draw b random hyperplanes through the origin
//     (randomness independent of the data); they cut the sphere into 2^b
//     cells, and each centre lies in exactly one cell.
//  2. Seeds (one Gaussian release). For every cell j, empty or not,
//     H_j = Σ_{w_i in cell j} w_i + N(0, m₀²·I_d).
//     Adding or removing one centre changes exactly one cell's sum by a
//     unit vector, so the stacked vector (H_1, …, H_{2^b}) has L2
//     sensitivity 1: a Gaussian mechanism with noise multiplier m₀. The
//     seed directions s_j = H_j/‖H_j‖ are post-processing.
//  3. Centres (K Gaussian releases). Active set A_1 = all centres. For
//     k = 1…K: take the seed s_j of the unused cell whose H_j has the
//     largest norm once its components along the earlier rounds' H are
//     projected out (post-processing of H: a cell holding more of an
//     already clustered region ranks low), let
//     S_k = {w ∈ A_k : ⟨w, s_j⟩ ≥ cos ρ}, release
//     Y_k = Σ_{w ∈ S_k} w + N(0, m²·I_d) and the centre c_k = Y_k/‖Y_k‖,
//     and set A_{k+1} = A_k \ S_k.
//  4. Output: c_1…c_K and Mass_k = ‖Y_k‖ (post-processing). Always
//     exactly K centres; no count, size or σ depends on the data.
//
// The centre is the normalised noisy sum rather than the paper's noisy
// mean: normalising removes the 1/|S| factor, so c_k has the direction of
// p + N(0, (m/|S_k|)²·I) with p the exact mean — the noise relative to the
// mean still falls as 1/|S| as in Theorem 2 — while σ on the sum is the
// data-independent m. The minimum size T and the stopping test are gone:
// a cap with few members yields a centre that is mostly noise, which its
// Mass shows at no privacy cost. (A noisy stopping rule by the sparse
// vector technique would be private too, but it spends budget and still
// releases a data-dependent number of centres; a fixed K costs nothing.)
//
// # Proof sketch of the charge
//
// Let x be the centre present in one neighbour only.
//
// (a) The seed release H is the Gaussian mechanism with L2 sensitivity 1
// (x lies in exactly one cell and changes that cell's sum by x, ‖x‖ = 1):
// Rényi DP α/(2m₀²) at every order α.
//
// (b) Given H, every seed s_1…s_K is fixed (the choice reads H only), and
// so is, for every possible centre w, the round whose cap takes it (the
// first k with ⟨w, s_k⟩ ≥ cos ρ) or none: S_1…S_K are disjoint and
// membership depends on w and H alone. The K releases together are
// therefore the stacked vector (Σ_{S_1} w, …, Σ_{S_K} w) plus
// N(0, m²·I_{Kd}), and x changes at most one block, by x: a Gaussian
// mechanism with L2 sensitivity 1, Rényi DP α/(2m²), however large K is
// (parallel composition).
//
// (c) Adaptive composition of (a) and (b) in RDP: α/(2m₀²) + α/(2m²) =
// α/(2m_eff²) with 1/m_eff² = 1/m₀² + 1/m², a single Gaussian's curve.
// Centres c_k and Mass_k are post-processing. dp's accountant converts the
// curve to (ε, δ) (Balle et al. 2020); Calibrate picks the smallest m_eff
// for which the conversion gives at most ε at δ and splits it equally:
// m₀ = m = √2·m_eff. The charge (Calibration.Events) is exactly the two
// Gaussian events of (a) and (b), whatever K, n or the data; and since the
// composition is a Gaussian mechanism of multiplier m_eff, its exact
// privacy curve (dp.GaussianDelta) confirms the (ε, δ).
//
// (d) Exact noise. dp releases each d-block (one cell sum, one cap sum)
// snapped to a power-of-two grid γ with discrete Gaussian noise on it
// (dp.Grid). Snapping moves each coordinate by at most γ/2, so a block
// that differs by x differs by at most 1/γ + √d grid steps, and every
// other block has the same input and the same snapped value; the discrete
// Gaussian has the continuous one's RDP at that integer sensitivity
// (Canonne, Kamath & Steinke 2020). The multiplier of (a) and (b) is
// therefore the grid's GaussianMultiplier(1), a factor about 1 + 2^−20·σ
// below σ; Calibrate raises σ until it is at least √2·m_eff and charges
// that multiplier.
//
// # Limits
//
// Cluster.Size, Exact and SumNorm are computed from the private centres
// without noise; they are diagnostics for tests and must not be released.
// Run's running time grows with n (a timing side channel to whoever can
// time the process). Input validation (zero or non-finite rows) fails
// before anything is released. Noise comes from dp.Source.
package dplc

import (
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/vec"
)

// Defaults and bounds of the public parameters.
const (
	// DefaultSeedBits is the number of hyperplanes of the public partition
	// when Params.SeedBits is 0: 16 cells, enough for a few clusters per
	// run while keeping each cell's sum well above the seed noise.
	DefaultSeedBits = 4
	// MaxSeedBits bounds the partition to 4096 cells (memory 2^b·d).
	MaxSeedBits = 12
)

// Params are DPLC's public parameters.
type Params struct {
	// Margin ρ ∈ (0, π): the angular radius of a cluster.
	Margin float64
	// Clusters K ≥ 1: the number of centres released, exactly (at most
	// 2^SeedBits).
	Clusters int
	// SeedBits b ∈ [1, MaxSeedBits]: the public partition has 2^b cells;
	// 0 means DefaultSeedBits.
	SeedBits int
	// Epsilon and Delta are the privacy cost of the whole run, for one
	// class centre (identity) added or removed.
	Epsilon, Delta float64
}

func (p Params) seedBits() int {
	if p.SeedBits == 0 {
		return DefaultSeedBits
	}
	return p.SeedBits
}

// Validate checks the parameters.
func (p Params) Validate() error {
	if math.IsNaN(p.Margin) || p.Margin <= 0 || p.Margin >= math.Pi {
		return fmt.Errorf("dplc: margin must be in (0, π), got %g", p.Margin)
	}
	if p.SeedBits < 0 || p.SeedBits > MaxSeedBits {
		return fmt.Errorf("dplc: seed bits must be between 1 and %d (0 for the default %d), got %d", MaxSeedBits, DefaultSeedBits, p.SeedBits)
	}
	if cells := 1 << p.seedBits(); p.Clusters < 1 || p.Clusters > cells {
		return fmt.Errorf("dplc: number of clusters must be between 1 and %d (2^seed bits), got %d", cells, p.Clusters)
	}
	if math.IsNaN(p.Epsilon) || math.IsInf(p.Epsilon, 0) || p.Epsilon <= 0 {
		return fmt.Errorf("dplc: epsilon must be a positive finite number, got %g", p.Epsilon)
	}
	if math.IsNaN(p.Delta) || p.Delta <= 0 || p.Delta >= 1 {
		return fmt.Errorf("dplc: delta must be in (0, 1), got %g", p.Delta)
	}
	return nil
}

// Calibration is the noise of a run and its privacy charge; it depends on
// the public parameters and the dimension only.
type Calibration struct {
	// SeedNoise and CentreNoise are the standard deviations of the
	// Gaussian noise on each cell sum and each cap sum (L2 sensitivity 1).
	SeedNoise   float64 `json:"seed_noise"`
	CentreNoise float64 `json:"centre_noise"`
	// Epsilon is the accountant's ε for Events at Delta (at most the
	// requested ε).
	Epsilon float64 `json:"epsilon"`
	Delta   float64 `json:"delta"`
	// Events are the two Gaussian releases to charge to a dp.Accountant or
	// dp.Ledger: the seeds and the K centres together. Their noise
	// multipliers are those of dp's exact (discrete, grid-snapped) release
	// of a d-vector of sensitivity 1 at the noise above (dp.Grid).
	Events []dp.Event `json:"events"`
}

// Calibrate returns the noise for a run at the parameters' (ε, δ) on
// centres of dimension dim: the smallest m_eff (to a relative 1e-9,
// rounded up) for which one Gaussian mechanism's RDP converts to at most ε
// at δ, split equally between the seed and the centre releases, each of
// multiplier at least √2·m_eff (see the package documentation for the
// proof). The noise standard deviation is raised just enough that dp's
// exact release on its grid keeps that multiplier.
func Calibrate(p Params, dim int) (Calibration, error) {
	if err := p.Validate(); err != nil {
		return Calibration{}, err
	}
	if dim < 1 {
		return Calibration{}, fmt.Errorf("dplc: dimension must be at least 1, got %d", dim)
	}
	mEff, err := gaussianMultiplier(p.Epsilon, p.Delta)
	if err != nil {
		return Calibration{}, err
	}
	sigma, mult, err := gridNoise(math.Sqrt2*mEff, dim)
	if err != nil {
		return Calibration{}, err
	}
	seeds, err := dp.GaussianEvent(mult, 1)
	if err != nil {
		return Calibration{}, err
	}
	centres, err := dp.GaussianEvent(mult, 1)
	if err != nil {
		return Calibration{}, err
	}
	seeds.Label, centres.Label = "dplc seeds", "dplc centres"
	events := []dp.Event{seeds, centres}
	eps, err := accountEpsilon(p.Delta, events...)
	if err != nil {
		return Calibration{}, err
	}
	return Calibration{SeedNoise: sigma, CentreNoise: sigma, Epsilon: eps, Delta: p.Delta, Events: events}, nil
}

// gridNoise returns the smallest standard deviation σ (found by a few
// upward corrections) whose exact release of a dim-vector of L2
// sensitivity 1 (dp.GaussianGrid) has a noise multiplier of at least
// target, and that multiplier.
func gridNoise(target float64, dim int) (sigma, mult float64, err error) {
	sigma = target
	for range 64 {
		g, err := dp.GaussianGrid(sigma, dim)
		if err != nil {
			return 0, 0, err
		}
		if mult, err = g.GaussianMultiplier(1); err != nil {
			return 0, 0, err
		}
		if mult >= target {
			return sigma, mult, nil
		}
		sigma *= (target / mult) * (1 + 1e-12)
	}
	return 0, 0, fmt.Errorf("dplc: no noise level reaches multiplier %g in dimension %d", target, dim)
}

// accountEpsilon is ε at δ of events by dp's default RDP accountant.
func accountEpsilon(delta float64, events ...dp.Event) (float64, error) {
	a, err := dp.NewAccountant(nil)
	if err != nil {
		return 0, err
	}
	if err := a.Add(events...); err != nil {
		return 0, err
	}
	eps, _, err := a.Epsilon(delta)
	return eps, err
}

// gaussianMultiplier returns the smallest noise multiplier (relative
// precision 1e-9, rounded up) of one Gaussian release that the accountant
// finds (ε, δ)-DP.
func gaussianMultiplier(eps, delta float64) (float64, error) {
	epsAt := func(m float64) (float64, error) {
		ev, err := dp.GaussianEvent(m, 1)
		if err != nil {
			return 0, err
		}
		return accountEpsilon(delta, ev)
	}
	lo, hi := 0.0, 1.0
	for {
		e, err := epsAt(hi)
		if err != nil {
			return 0, err
		}
		if e <= eps {
			break
		}
		lo, hi = hi, 2*hi
		if hi > 1e9 {
			return 0, fmt.Errorf("dplc: no noise level reaches epsilon=%g at delta=%g", eps, delta)
		}
	}
	for hi-lo > 1e-9*hi {
		mid := (lo + hi) / 2
		e, err := epsAt(mid)
		if err != nil {
			return 0, err
		}
		if e <= eps {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// Sensitivity returns the L2 sensitivity of the mean of |S| unit centres
// within margin ρ of a common centre under replacement of one of them,
// (1/|S|)·√(2 − 2cos 2ρ) (proof of Theorem 2; 2/|S| for ρ > π/2). It is
// the paper's per-query analysis, kept for comparison: Run does not use it.
func Sensitivity(size int, rho float64) float64 {
	if rho > math.Pi/2 {
		return 2 / float64(size)
	}
	return math.Sqrt(2-2*math.Cos(2*rho)) / float64(size)
}

// Sigma returns the noise of the paper's Theorem 2,
// σ = (2/(|S|ε))·√((1 − cos 2ρ)·ln(1.25/δ)) (for ρ ≤ π/2; above, the
// classic Gaussian bound with sensitivity 2/|S|). It depends on the
// private |S| and so is not a private σ; kept to compare with Run's noise.
func Sigma(size int, rho, eps, delta float64) (float64, error) {
	if size < 1 {
		return 0, fmt.Errorf("dplc: cluster size must be at least 1, got %d", size)
	}
	if math.IsNaN(rho) || rho <= 0 || rho >= math.Pi {
		return 0, fmt.Errorf("dplc: margin must be in (0, π), got %g", rho)
	}
	if rho > math.Pi/2 {
		return dp.ClassicGaussianSigma(Sensitivity(size, rho), eps, delta)
	}
	if _, err := dp.ClassicGaussianSigma(1, eps, delta); err != nil {
		return 0, err
	}
	return 2 / (float64(size) * eps) * math.Sqrt((1-math.Cos(2*rho))*math.Log(1.25/delta)), nil
}

// OccupancyRatio returns the fraction of the unit sphere in R^d covered by a
// cap of angular radius ρ: ½·I_{sin²ρ}((d−1)/2, ½) for ρ ≤ π/2 (Theorem 1)
// and 1 − ½·I_{sin²ρ}((d−1)/2, ½) beyond.
func OccupancyRatio(d int, rho float64) (float64, error) {
	if d < 2 {
		return 0, fmt.Errorf("dplc: dimension must be at least 2, got %d", d)
	}
	if math.IsNaN(rho) || rho < 0 || rho > math.Pi {
		return 0, fmt.Errorf("dplc: margin must be in [0, π], got %g", rho)
	}
	s := math.Sin(rho)
	i, err := dp.RegIncBeta(s*s, float64(d-1)/2, 0.5)
	if err != nil {
		return 0, fmt.Errorf("dplc: occupancy ratio: %w", err)
	}
	if rho > math.Pi/2 {
		return 1 - i/2, nil
	}
	return i / 2, nil
}

// Cluster is one released cluster.
type Cluster struct {
	// Center is the noisy, normalised centre c_k (released).
	Center []float32 `json:"center"`
	// Mass is ‖Y_k‖, the norm of the noisy cap sum (released; a
	// post-processing of Y_k). Its square is about ‖Σ_{S_k} w‖² + m²·d, so
	// √max(0, Mass² − m²·d) estimates the exact sum's norm and a consumer
	// can drop centres that are mostly noise.
	Mass float64 `json:"mass"`
	// Size is |S_k|, Exact the noise-free normalised sum and SumNorm its
	// norm ‖Σ_{S_k} w‖: diagnostics computed from private data without
	// noise. Never release them.
	Size    int       `json:"-"`
	Exact   []float32 `json:"-"`
	SumNorm float64   `json:"-"`
}

// Result is DPLC's output.
type Result struct {
	// Clusters holds exactly Params.Clusters released centres.
	Clusters []Cluster `json:"clusters"`
	// Calibration is the noise used and the privacy charge.
	Calibration
}

// Run clusters the class centres (rows of equal dimension; each is
// normalised, zero or non-finite rows are refused) and releases exactly
// p.Clusters noisy centres; the run is (p.Epsilon, p.Delta)-DP for one
// centre added or removed (see the package documentation). src supplies
// the noise and the public partition (nil: a fresh crypto/rand-seeded
// source).
func Run(centres [][]float32, p Params, src *dp.Source) (Result, error) {
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if len(centres) == 0 {
		return Result{}, errors.New("dplc: no class centres")
	}
	cal, err := Calibrate(p, len(centres[0]))
	if err != nil {
		return Result{}, err
	}
	return run(centres, p, cal, src)
}

// run is Run with a given calibration (tests substitute too little noise
// to check that the adversary tests can detect it).
func run(centres [][]float32, p Params, cal Calibration, src *dp.Source) (Result, error) {
	w, n, d, err := normalised(centres)
	if err != nil {
		return Result{}, err
	}
	if src == nil {
		if src, err = dp.NewSource(); err != nil {
			return Result{}, err
		}
	}
	bits := p.seedBits()
	cells := 1 << bits

	// 1. Public partition: b random hyperplanes, independent of the data.
	planes := make([]float32, bits*d)
	src.AddGaussian32(planes, 1)
	cell := make([]int, n)
	for i := range n {
		wi := w[i*d : (i+1)*d]
		j := 0
		for ; j+4 <= bits; j += 4 {
			p0, p1, p2, p3 := vec.Dot32x4(wi, planes[j*d:(j+1)*d], planes[(j+1)*d:(j+2)*d], planes[(j+2)*d:(j+3)*d], planes[(j+3)*d:(j+4)*d])
			for k, v := range [4]float32{p0, p1, p2, p3} {
				if v >= 0 {
					cell[i] |= 1 << (j + k)
				}
			}
		}
		for ; j < bits; j++ {
			if vec.Dot32(wi, planes[j*d:(j+1)*d]) >= 0 {
				cell[i] |= 1 << j
			}
		}
	}

	// 2. Seeds: every cell's sum plus N(0, m₀²) — empty cells too.
	sums := make([]float64, cells*d)
	for i := range n {
		row := sums[cell[i]*d : (cell[i]+1)*d]
		for t, v := range w[i*d : (i+1)*d] {
			row[t] += float64(v)
		}
	}
	for j := range cells {
		src.AddGaussian64(sums[j*d:(j+1)*d], cal.SeedNoise) // one grid per cell, as calibrated
	}
	seeds := make([][]float32, cells)
	for j := range cells {
		seeds[j], _ = unit(sums[j*d : (j+1)*d])
	}
	pick := newPicker(sums, cells, d)

	// 3. Centres: one cap sum per round, members leave the active set.
	cosRho := float32(math.Cos(p.Margin))
	active := make([]bool, n)
	for i := range active {
		active[i] = true
	}
	res := Result{Calibration: cal, Clusters: make([]Cluster, 0, p.Clusters)}
	sum := make([]float64, d)
	for range p.Clusters {
		seed := seeds[pick.next()]
		clear(sum)
		size := 0
		for i := range n {
			wi := w[i*d : (i+1)*d]
			if active[i] && vec.Dot32(wi, seed) >= cosRho {
				active[i] = false
				size++
				for t, v := range wi {
					sum[t] += float64(v)
				}
			}
		}
		exact, sumNorm := unit(sum)
		src.AddGaussian64(sum, cal.CentreNoise)
		center, mass := unit(sum)
		res.Clusters = append(res.Clusters, Cluster{Center: center, Mass: mass, Size: size, Exact: exact, SumNorm: sumNorm})
	}
	return res, nil
}

// picker chooses each round's seed from the noisy cell sums alone: the
// unused cell whose sum has the largest norm once its components along
// the earlier rounds' seeds are projected out. A cell that held more of an
// already clustered region then ranks low (its cap would mostly be
// emptied by the removals), while a cell that mixes such a region with a
// new one keeps the new part's weight.
type picker struct {
	sums  []float64   // cells × d noisy sums (released values)
	d     int         // dimension
	used  []bool      // cells already chosen
	basis [][]float64 // orthonormal basis of the chosen cells' sums
}

func newPicker(sums []float64, cells, d int) *picker {
	return &picker{sums: sums, d: d, used: make([]bool, cells)}
}

// next returns the chosen cell and marks it used (at least one must be
// unused).
func (p *picker) next() int {
	best, bestR := -1, math.Inf(-1)
	for j, u := range p.used {
		if u {
			continue
		}
		h := p.sums[j*p.d : (j+1)*p.d]
		r := 0.0
		for _, x := range h {
			r += x * x
		}
		for _, b := range p.basis {
			c := dot64(h, b)
			r -= c * c
		}
		r = max(r, 0) // rounding once the basis spans the space
		if r > bestR {
			best, bestR = j, r
		}
	}
	p.used[best] = true
	h := p.sums[best*p.d : (best+1)*p.d]
	v := make([]float64, p.d)
	copy(v, h)
	for _, b := range p.basis {
		c := dot64(h, b)
		for t := range v {
			v[t] -= c * b[t]
		}
	}
	var n, hn float64
	for t, x := range v {
		n += x * x
		hn += h[t] * h[t]
	}
	// A residual lost in rounding (the basis spans the space already)
	// would not be orthogonal to the basis: leave it out.
	if n = math.Sqrt(n); n > 1e-6*math.Sqrt(hn) {
		for t := range v {
			v[t] /= n
		}
		p.basis = append(p.basis, v)
	}
	return best
}

func dot64(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// unit returns v/‖v‖ as float32 and ‖v‖ (a zero vector stays zero).
func unit(v []float64) ([]float32, float64) {
	var ss float64
	for _, x := range v {
		ss += x * x
	}
	norm := math.Sqrt(ss)
	out := make([]float32, len(v))
	if norm > 0 {
		for i, x := range v {
			out[i] = float32(x / norm)
		}
	}
	return out, norm
}

// CheckCentres reports whether Run accepts the centres: at least one row,
// all of the same positive dimension, none zero or with a non-finite
// value. Run checks the same; call CheckCentres before charging a ledger,
// so that input Run would refuse never costs privacy. The error names the
// row, never its values.
func CheckCentres(centres [][]float32) error {
	n := len(centres)
	if n == 0 {
		return errors.New("dplc: no class centres")
	}
	d := len(centres[0])
	if d == 0 {
		return errors.New("dplc: class centres have dimension 0")
	}
	for i, c := range centres {
		if len(c) != d {
			return fmt.Errorf("dplc: centre %d has dimension %d, want %d", i, len(c), d)
		}
		var ss float64
		for _, v := range c {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("dplc: centre %d is not finite", i)
			}
			ss += float64(v) * float64(v)
		}
		if ss == 0 {
			return fmt.Errorf("dplc: centre %d is zero (it has no direction)", i)
		}
	}
	return nil
}

// normalised checks the centres and returns them as unit rows, row-major.
func normalised(centres [][]float32) (w []float32, n, d int, err error) {
	if err := CheckCentres(centres); err != nil {
		return nil, 0, 0, err
	}
	n = len(centres)
	if n == 0 {
		return nil, 0, 0, errors.New("dplc: no class centres")
	}
	d = len(centres[0])
	if d == 0 {
		return nil, 0, 0, errors.New("dplc: class centres have dimension 0")
	}
	w = make([]float32, n*d)
	for i, c := range centres {
		if len(c) != d {
			return nil, 0, 0, fmt.Errorf("dplc: centre %d has dimension %d, want %d", i, len(c), d)
		}
		var ss float64
		for _, v := range c {
			ss += float64(v) * float64(v)
		}
		if math.IsNaN(ss) || math.IsInf(ss, 0) || ss == 0 { // CheckCentres refused these
			return nil, 0, 0, fmt.Errorf("dplc: centre %d is zero or not finite", i)
		}
		inv := 1 / math.Sqrt(ss)
		for j, v := range c {
			w[i*d+j] = float32(float64(v) * inv)
		}
	}
	return w, n, d, nil
}
