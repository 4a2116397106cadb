// Package dplc implements differentially private local clustering (DPLC),
// Algorithm 1 of PrivacyFace (Meng et al.): greedy spherical-cap
// clustering of a client's unit class centres with margin ρ, minimum
// cluster size T and at most Q queries, each cluster mean released with the
// Gaussian noise of the paper's Theorem 2 and normalised. It also computes
// the occupancy ratio of Theorem 1.
//
// Cost: each released centre is the Gaussian mechanism with noise
// multiplier √(2 ln(1.25/δ))/ε (σ over the Theorem-2 sensitivity
// (1/|S|)·√(2 − 2cos 2ρ)), so Q queries cost (Qε, Qδ) by basic composition
// as the paper states; Result.Events charges the same Gaussian releases to a
// dp.Accountant or dp.Ledger, which composes them more tightly by RDP.
//
// Caveat (the paper's, kept as written): the analysis covers the noisy mean
// of a given set S. The greedy choice of S, its size (which sets σ) and the
// |S| ≥ T stopping test are computed from the private centres without
// noise, as in Algorithm 1.
package dplc

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"

	"github.com/veil-privacy/veil/dp"
)

// Params are DPLC's parameters.
type Params struct {
	// Margin ρ ∈ (0, π): the angular radius of a cluster.
	Margin float64
	// MinSize T ≥ 1: clusters smaller than T stop the algorithm.
	MinSize int
	// MaxQueries Q ≥ 1: the most clusters released.
	MaxQueries int
	// Epsilon and Delta are the per-query privacy budget.
	Epsilon, Delta float64
}

// Validate checks the parameters.
func (p Params) Validate() error {
	if math.IsNaN(p.Margin) || p.Margin <= 0 || p.Margin >= math.Pi {
		return fmt.Errorf("dplc: margin must be in (0, π), got %g", p.Margin)
	}
	if p.MinSize < 1 {
		return fmt.Errorf("dplc: minimum cluster size must be at least 1, got %d", p.MinSize)
	}
	if p.MaxQueries < 1 {
		return fmt.Errorf("dplc: maximum queries must be at least 1, got %d", p.MaxQueries)
	}
	if math.IsNaN(p.Epsilon) || math.IsInf(p.Epsilon, 0) || p.Epsilon <= 0 {
		return fmt.Errorf("dplc: epsilon must be a positive finite number, got %g", p.Epsilon)
	}
	if math.IsNaN(p.Delta) || p.Delta <= 0 || p.Delta >= 1 {
		return fmt.Errorf("dplc: delta must be in (0, 1), got %g", p.Delta)
	}
	return nil
}

// Sensitivity returns the L2 sensitivity of the mean of |S| unit centres
// within margin ρ of a common centre, (1/|S|)·√(2 − 2cos 2ρ) (proof of
// Theorem 2). For ρ > π/2 the bound cos(2ρ) no longer holds and the
// worst case 2/|S| is returned.
func Sensitivity(size int, rho float64) float64 {
	if rho > math.Pi/2 {
		return 2 / float64(size)
	}
	return math.Sqrt(2-2*math.Cos(2*rho)) / float64(size)
}

// Sigma returns the noise of Theorem 2:
// σ = (2/(|S|ε))·√((1 − cos 2ρ)·ln(1.25/δ)) (for ρ ≤ π/2; above, the
// classic Gaussian bound with sensitivity 2/|S|).
func Sigma(size int, rho, eps, delta float64) (float64, error) {
	if size < 1 {
		return 0, fmt.Errorf("dplc: cluster size must be at least 1, got %d", size)
	}
	p := Params{Margin: rho, MinSize: 1, MaxQueries: 1, Epsilon: eps, Delta: delta}
	if err := p.Validate(); err != nil {
		return 0, err
	}
	if rho > math.Pi/2 {
		return dp.ClassicGaussianSigma(Sensitivity(size, rho), eps, delta)
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
	// Center is the noisy, normalised centre p̂ (the only private output).
	Center []float32 `json:"center"`
	// Size is |S|, Sigma the noise standard deviation used, Removed how many
	// centres left the pool after this query. These are diagnostics computed
	// from private data: do not release them.
	Size    int     `json:"size"`
	Sigma   float64 `json:"sigma"`
	Removed int     `json:"removed"`
	// Exact is the noise-free normalised mean p/‖p‖ (diagnostic only, never
	// release it).
	Exact []float32 `json:"-"`
	// MeanNorm is ‖p‖ (diagnostic only, never release it).
	MeanNorm float64 `json:"-"`
}

// Result is DPLC's output.
type Result struct {
	Clusters []Cluster `json:"clusters"`
	// Epsilon and Delta are the paper's cost (Qε, Qδ) with Q = MaxQueries.
	Epsilon float64 `json:"epsilon"`
	Delta   float64 `json:"delta"`
	// Events are the Gaussian releases to charge to an accountant (Q of them).
	Events []dp.Event `json:"events"`
}

// Run clusters the class centres (rows of equal dimension; each is
// normalised, zero or non-finite rows are refused) and releases up to Q
// noisy cluster centres. src supplies the noise (nil: a fresh
// crypto/rand-seeded source).
func Run(centres [][]float32, p Params, src *dp.Source) (Result, error) {
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	n := len(centres)
	if n == 0 {
		return Result{}, errors.New("dplc: no class centres")
	}
	d := len(centres[0])
	if d == 0 {
		return Result{}, errors.New("dplc: class centres have dimension 0")
	}
	if src == nil {
		var err error
		if src, err = dp.NewSource(); err != nil {
			return Result{}, err
		}
	}
	w := make([]float32, n*d)
	for i, c := range centres {
		if len(c) != d {
			return Result{}, fmt.Errorf("dplc: centre %d has dimension %d, want %d", i, len(c), d)
		}
		var ss float64
		for _, v := range c {
			ss += float64(v) * float64(v)
		}
		if math.IsNaN(ss) || math.IsInf(ss, 0) || ss == 0 {
			return Result{}, fmt.Errorf("dplc: centre %d is zero or not finite", i)
		}
		inv := 1 / math.Sqrt(ss)
		for j, v := range c {
			w[i*d+j] = float32(float64(v) * inv)
		}
	}
	cosRho := float32(math.Cos(p.Margin))
	words := (n + 63) / 64
	nb := neighbours(w, n, d, cosRho, words)
	active := make([]uint64, words)
	for i := range n {
		active[i/64] |= 1 << (i % 64)
	}
	mult := math.Sqrt(2*math.Log(1.25/p.Delta)) / p.Epsilon
	ev, err := dp.GaussianEvent(mult, p.MaxQueries)
	if err != nil {
		return Result{}, err
	}
	res := Result{Epsilon: float64(p.MaxQueries) * p.Epsilon, Delta: float64(p.MaxQueries) * p.Delta, Events: []dp.Event{ev}}
	for range p.MaxQueries {
		best, bestSize := -1, -1
		for i := range n {
			if active[i/64]&(1<<(i%64)) == 0 {
				continue
			}
			row := nb[i*words : (i+1)*words]
			c := 0
			for k, a := range active {
				c += bits.OnesCount64(row[k] & a)
			}
			if c > bestSize {
				best, bestSize = i, c
			}
		}
		if best < 0 || bestSize < p.MinSize {
			break
		}
		mean := make([]float64, d)
		row := nb[best*words : (best+1)*words]
		for k, a := range active {
			m := row[k] & a
			for m != 0 {
				j := k*64 + bits.TrailingZeros64(m)
				m &= m - 1
				for t, v := range w[j*d : (j+1)*d] {
					mean[t] += float64(v)
				}
			}
		}
		var norm float64
		for t := range mean {
			mean[t] /= float64(bestSize)
			norm += mean[t] * mean[t]
		}
		norm = math.Sqrt(norm)
		sigma, err := Sigma(bestSize, p.Margin, p.Epsilon, p.Delta)
		if err != nil {
			return Result{}, err
		}
		noisy := make([]float64, d)
		copy(noisy, mean)
		src.AddGaussian64(noisy, sigma)
		var nn float64
		for _, v := range noisy {
			nn += v * v
		}
		nn = math.Sqrt(nn)
		cl := Cluster{Center: make([]float32, d), Exact: make([]float32, d), Size: bestSize, Sigma: sigma, MeanNorm: norm}
		for t := range noisy {
			cl.Center[t] = float32(noisy[t] / nn)
			cl.Exact[t] = float32(mean[t] / norm)
		}
		// Remove every active centre within ρ of p/‖p‖.
		for i := range n {
			if active[i/64]&(1<<(i%64)) != 0 && dot(w[i*d:(i+1)*d], cl.Exact) >= cosRho {
				active[i/64] &^= 1 << (i % 64)
				cl.Removed++
			}
		}
		res.Clusters = append(res.Clusters, cl)
	}
	return res, nil
}

// tile is the number of rows per block of the neighbour computation:
// two blocks of 32 rows of 512 float32 (128 KiB) stay in L2 cache.
const tile = 32

// neighbours returns the n×words bitset of pairs with w_i·w_j ≥ cos ρ,
// computed once (O(n²d)): the upper triangle in cache-sized tiles, in
// parallel over row blocks (each worker owns its rows), then mirrored.
func neighbours(w []float32, n, d int, cosRho float32, words int) []uint64 {
	nb := make([]uint64, n*words)
	blocks := (n + tile - 1) / tile
	next := make(chan int, blocks)
	for b := range blocks {
		next <- b
	}
	close(next)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ib := range next {
				i0, i1 := ib*tile, min((ib+1)*tile, n)
				for jb := ib; jb < blocks; jb++ {
					j0, j1 := jb*tile, min((jb+1)*tile, n)
					for i := i0; i < i1; i++ {
						wi := w[i*d : (i+1)*d]
						row := nb[i*words : (i+1)*words]
						j := max(j0, i)
						for ; j+4 <= j1; j += 4 {
							c0, c1, c2, c3 := dot4(wi, w[j*d:(j+1)*d], w[(j+1)*d:(j+2)*d], w[(j+2)*d:(j+3)*d], w[(j+3)*d:(j+4)*d])
							for k, c := range [4]float32{c0, c1, c2, c3} {
								if c >= cosRho {
									row[(j+k)/64] |= 1 << ((j + k) % 64)
								}
							}
						}
						for ; j < j1; j++ {
							if dot(wi, w[j*d:(j+1)*d]) >= cosRho {
								row[j/64] |= 1 << (j % 64)
							}
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	for i := range n {
		row := nb[i*words : (i+1)*words]
		for k := i / 64; k < words; k++ {
			m := row[k]
			for m != 0 {
				j := k*64 + bits.TrailingZeros64(m)
				m &= m - 1
				if j > i {
					nb[j*words+i/64] |= 1 << (i % 64)
				}
			}
		}
	}
	return nb
}
