package dp

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// SGDConfig configures one DP-SGD aggregation (Abadi et al. 2016; Zhang et
// al., the multi-task paper's Section on DP-SGD; Irene Algorithm 2).
type SGDConfig struct {
	// ClipNorm C: each per-example gradient is scaled to L2 norm ≤ C.
	ClipNorm float64
	// NoiseMultiplier σ: the sum gets noise of standard deviation σ·C per
	// coordinate (discrete Gaussian on a fine grid, see NoiseSums).
	NoiseMultiplier float64
	// SamplingRate q of Poisson sampling, used for accounting.
	SamplingRate float64
	// ExpectedBatchSize q·N divides the noisy sum (dividing by the realised
	// batch size would leak it).
	ExpectedBatchSize float64
	// Dimension is the total number of coordinates noised per step (all
	// parameters together). The grid, and so the accounting, depend on it.
	Dimension int
	// Workers is the number of goroutines NoiseSums uses, each with its
	// own Source split from the one given to NewDPSGD; 0 means 1.
	Workers int
}

// Validate checks every field.
func (c SGDConfig) Validate() error {
	if err := checkPositive("clip norm", c.ClipNorm); err != nil {
		return err
	}
	if err := checkPositive("noise multiplier", c.NoiseMultiplier); err != nil {
		return err
	}
	if err := checkSamplingRate(c.SamplingRate); err != nil {
		return err
	}
	if err := checkPositive("expected batch size", c.ExpectedBatchSize); err != nil {
		return err
	}
	if c.Dimension < 1 {
		return fmt.Errorf("dp: the number of noised coordinates (dimension) must be at least 1, got %d", c.Dimension)
	}
	if c.Workers < 0 || c.Workers > 64 {
		return fmt.Errorf("dp: the number of noise workers must be between 0 and 64, got %d", c.Workers)
	}
	return nil
}

// grid returns the grid DP-SGD noise is released on: fine relative to
// the clip norm C (γ ≤ 2^−20·C/√d), so rounding grows the L2 sensitivity
// from C to at most C·(1 + 2^−20), unless σ·C/γ would exceed 2^31 (σ
// above about 2^11/√(d/2^20)), when γ is coarsened and the growth is
// γ√d/C ≤ 2^−30·σ·√d.
func (c SGDConfig) grid() (Grid, error) {
	return gaussianGrid(c.NoiseMultiplier*c.ClipNorm, c.ClipNorm, c.Dimension)
}

// EffectiveNoiseMultiplier returns the noise multiplier the discretised
// step satisfies: the integer noise parameter over the integer L2
// sensitivity after rounding, Scale/(C/γ + √d) ≤ σ. It is what Event
// charges.
func (c SGDConfig) EffectiveNoiseMultiplier() (float64, error) {
	if err := c.Validate(); err != nil {
		return 0, inContext("DP-SGD settings", err)
	}
	g, err := c.grid()
	if err != nil {
		return 0, err
	}
	return g.GaussianMultiplier(c.ClipNorm)
}

// DPSGD performs the engine-agnostic DP-SGD aggregation on flat gradient
// vectors. Not safe for concurrent use.
type DPSGD struct {
	cfg   SGDConfig
	grid  Grid
	table *gaussTable // exact sampler for grid.Scale, shared by the workers
	srcs  []*Source
	acc   []float64
}

// NewDPSGD validates cfg and returns an aggregator; src is the noise source
// (nil means a fresh crypto/rand-seeded Source). With cfg.Workers > 1 the
// extra workers get Sources split from src.
func NewDPSGD(cfg SGDConfig, src *Source) (*DPSGD, error) {
	if err := cfg.Validate(); err != nil {
		return nil, inContext("DP-SGD settings", err)
	}
	g, err := cfg.grid()
	if err != nil {
		return nil, inContext("DP-SGD settings", err)
	}
	if src == nil {
		if src, err = NewSource(); err != nil {
			return nil, err
		}
	}
	table := src.gaussTableFor(g.Scale)
	srcs := []*Source{src}
	for len(srcs) < cfg.Workers {
		srcs = append(srcs, src.Split())
	}
	return &DPSGD{cfg: cfg, grid: g, table: table, srcs: srcs}, nil
}

// Config returns the aggregator's configuration.
func (d *DPSGD) Config() SGDConfig { return d.cfg }

// Grid returns the grid the noisy sums are released on.
func (d *DPSGD) Grid() Grid { return d.grid }

// NoiseSums releases the clipped-gradient sums in place: every coordinate
// is rounded to the nearest multiple of the grid step γ (a power of two)
// and γ·Z is added, with Z exact discrete Gaussian noise of parameter
// ⌈σC/γ⌉ (standard deviation σ·C up to a relative 2^−20). The sums'
// total length must equal cfg.Dimension; non-finite values are refused
// before anything is changed. Divide the result by ExpectedBatchSize
// afterwards (post-processing) and charge Event.
func (d *DPSGD) NoiseSums(sums ...[]float32) error {
	n := 0
	for _, s := range sums {
		n += len(s)
	}
	if n != d.cfg.Dimension {
		return fmt.Errorf("dp: DP-SGD: the gradient sums have %d coordinates, the settings say %d", n, d.cfg.Dimension)
	}
	for _, s := range sums {
		for _, v := range s {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return errors.New("dp: DP-SGD: a gradient sum has non-finite entries")
			}
		}
	}
	w := len(d.srcs)
	if w == 1 {
		for _, s := range sums {
			d.srcs[0].gaussian32(s, d.grid, d.table)
		}
		return nil
	}
	// Split the concatenated coordinates into w contiguous ranges.
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	for k := range w {
		lo, hi := k*chunk, min(n, (k+1)*chunk)
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func(src *Source, lo, hi int) {
			defer wg.Done()
			off := 0
			for _, s := range sums {
				a, b := max(lo-off, 0), min(hi-off, len(s))
				if a < b {
					src.gaussian32(s[a:b], d.grid, d.table)
				}
				off += len(s)
			}
		}(d.srcs[k], lo, hi)
	}
	wg.Wait()
	return nil
}

// Aggregate clips each per-example gradient to L2 norm C, sums them,
// releases the sum with NoiseSums' noise and divides by the expected batch
// size, writing the result to out (len(out) = cfg.Dimension). An empty
// batch (possible under Poisson sampling) yields pure noise. It returns the
// number of gradients that were actually scaled down. Gradients with NaN
// or infinite entries are refused.
func (d *DPSGD) Aggregate(perExample [][]float32, out []float32) (clipped int, err error) {
	dim := len(out)
	if dim != d.cfg.Dimension {
		return 0, fmt.Errorf("dp: DP-SGD: output vector has %d coordinates, the settings say %d", dim, d.cfg.Dimension)
	}
	if cap(d.acc) < dim {
		d.acc = make([]float64, dim)
	}
	acc := d.acc[:dim]
	clear(acc)
	for i, g := range perExample {
		if len(g) != dim {
			return 0, fmt.Errorf("dp: DP-SGD: gradient %d has %d coordinates, want %d", i, len(g), dim)
		}
		var ss float64
		for _, v := range g {
			ss += float64(v) * float64(v)
		}
		if math.IsNaN(ss) || math.IsInf(ss, 0) {
			return 0, fmt.Errorf("dp: DP-SGD: gradient %d has non-finite entries", i)
		}
		scale := 1.0
		if n := math.Sqrt(ss); n > d.cfg.ClipNorm {
			scale = d.cfg.ClipNorm / n
			clipped++
		}
		for j, v := range g {
			acc[j] += scale * float64(v)
		}
	}
	src, g := d.srcs[0], d.grid
	inv := 1 / d.cfg.ExpectedBatchSize
	for j, v := range acc {
		out[j] = float32(release(snap(v, g.Gamma), src.tableGaussian(d.table), g.Gamma) * inv)
	}
	return clipped, nil
}

// Event returns the privacy cost of steps aggregations as an Event for an
// Accountant or Ledger: the Poisson-subsampled discrete Gaussian with the
// effective noise multiplier (EffectiveNoiseMultiplier), which accounts for
// the rounding to the grid.
func (d *DPSGD) Event(steps int) (Event, error) {
	mu, err := d.grid.GaussianMultiplier(d.cfg.ClipNorm)
	if err != nil {
		return Event{}, err
	}
	return SubsampledDiscreteGaussianEvent(d.cfg.SamplingRate, mu, steps)
}

// Charge composes steps aggregations into the accountant.
func (d *DPSGD) Charge(a *Accountant, steps int) error {
	e, err := d.Event(steps)
	if err != nil {
		return err
	}
	return a.Add(e)
}

// ClipL2 scales v in place to L2 norm at most c and returns the factor used.
func ClipL2(v []float32, c float64) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	n := math.Sqrt(ss)
	if n <= c || n == 0 {
		return 1
	}
	s := c / n
	for i := range v {
		v[i] = float32(float64(v[i]) * s)
	}
	return s
}
