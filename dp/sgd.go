package dp

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
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
	// Workers is the number of goroutines NoiseSums uses; 0 means 1. It
	// changes only the speed: the noise is drawn per block of coordinates
	// from a stream keyed by the block (see NoiseSums), so a seeded run
	// releases the same values whatever the number of workers or cores.
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
// from C to at most C·(1 + 2^−20), unless σ·C/γ would exceed 2^31 (σ√d
// above about 2^10 to 2^11), when γ is coarsened and the growth is
// γ√d/C < 2^−30·σ·√d (see EffectiveNoiseMultiplier).
func (c SGDConfig) grid() (Grid, error) {
	return gaussianGrid(c.NoiseMultiplier*c.ClipNorm, c.ClipNorm, c.Dimension)
}

// EffectiveNoiseMultiplier returns the noise multiplier the discretised
// step satisfies: the integer noise parameter over the integer L2
// sensitivity after rounding, Scale/(C/γ + √d) ≤ σ. It is what Event
// charges. Its relative distance below σ is less than
// max(2^−20, σ·√d·2^−30): below 9.5e-7 while σ√d ≤ 2^10 (the main job's
// head: d = 557,824 at σ ≈ 1.32), but 0.28% at σ = 5000 on that head,
// where the integer parameter reaches 2^31 and the grid is coarsened.
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
	src   *Source     // the caller's stream: one 32-byte step key per release
	// work are the workers' Sources, re-keyed for every block they noise;
	// keys holds the block keys of the current release.
	work []*Source
	keys [][32]byte
	acc  []float64
}

// noiseBlock is the number of consecutive coordinates (of the concatenated
// sums) whose noise comes from one keyed stream. It fixes which random
// words noise which coordinate, independently of the number of workers; at
// 2^12 coordinates per block, re-keying a stream (one ChaCha8 key setup)
// costs well under 1% of the block's exact Gaussian draws.
const noiseBlock = 1 << 12

// NewDPSGD validates cfg and returns an aggregator; src is the noise source
// (nil means a fresh crypto/rand-seeded Source). Each release takes one
// 32-byte key from src, whatever cfg.Workers, and noises block b of
// noiseBlock coordinates from a ChaCha8 stream keyed by the b-th 32 bytes
// of a stream keyed by that step key (the construction of Source.Split),
// so the noise depends on src's seed and the release's position in src's
// stream, never on how the blocks were spread over goroutines. With
// crypto/rand's seed (src nil or NewSource) every block key is CSPRNG
// output.
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
	// The workers' Sources are keyed afresh for every block (reseed), so
	// their initial all-zero key never draws noise.
	work := make([]*Source, max(cfg.Workers, 1))
	for i := range work {
		work[i] = NewSeededSource([32]byte{})
	}
	return &DPSGD{cfg: cfg, grid: g, table: table, src: src, work: work}, nil
}

// blockKeys derives the keys of the n blocks of one release: one step key
// from the caller's stream, then n consecutive 32-byte words of a ChaCha8
// stream keyed by it.
func (d *DPSGD) blockKeys(n int) [][32]byte {
	var step [32]byte
	d.src.fill(step[:])
	k := NewSeededSource(step)
	clear(step[:])
	if cap(d.keys) < n {
		d.keys = make([][32]byte, n)
	}
	d.keys = d.keys[:n]
	for b := range d.keys {
		k.fill(d.keys[b][:])
	}
	return d.keys
}

// forBlocks calls noise(src, lo, hi) for every block [lo, hi) of n
// coordinates, with src keyed by the block's key, on up to len(d.work)
// goroutines; which goroutine takes a block does not change its noise.
// The keys are cleared afterwards.
func (d *DPSGD) forBlocks(n int, noise func(src *Source, lo, hi int)) {
	nb := (n + noiseBlock - 1) / noiseBlock
	keys := d.blockKeys(nb)
	defer clear(keys)
	run := func(src *Source, b int) {
		src.reseed(keys[b])
		noise(src, b*noiseBlock, min(n, (b+1)*noiseBlock))
	}
	w := min(len(d.work), nb)
	if w <= 1 {
		for b := range nb {
			run(d.work[0], b)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := range w {
		wg.Add(1)
		go func(src *Source) {
			defer wg.Done()
			for b := int(next.Add(1) - 1); b < nb; b = int(next.Add(1) - 1) {
				run(src, b)
			}
		}(d.work[k])
	}
	wg.Wait()
}

// Config returns the aggregator's configuration.
func (d *DPSGD) Config() SGDConfig { return d.cfg }

// Grid returns the grid the noisy sums are released on.
func (d *DPSGD) Grid() Grid { return d.grid }

// NoiseSums releases the clipped-gradient sums in place: every coordinate
// is rounded to the nearest multiple of the grid step γ (a power of two)
// and γ·Z is added, with Z exact discrete Gaussian noise of parameter
// ⌈σC/γ⌉ (standard deviation σ·C, rounded up by less than one grid
// step γ; the charge uses EffectiveNoiseMultiplier). The sums'
// total length must equal cfg.Dimension; non-finite values are refused
// before anything is changed. Divide the result by ExpectedBatchSize
// afterwards (post-processing) and charge Event.
//
// The noise of coordinate i (of the sums concatenated) comes from block
// i/2^12's keyed stream (see NewDPSGD): the same seed gives the same
// release for any cfg.Workers, GOMAXPROCS or split of the coordinates
// into sums.
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
	d.forBlocks(n, func(src *Source, lo, hi int) {
		off := 0
		for _, s := range sums {
			if a, b := max(lo-off, 0), min(hi-off, len(s)); a < b {
				src.gaussian32(s[a:b], d.grid, d.table)
			}
			off += len(s)
		}
	})
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
	g := d.grid
	inv := 1 / d.cfg.ExpectedBatchSize
	d.forBlocks(dim, func(src *Source, lo, hi int) {
		for j := lo; j < hi; j++ {
			out[j] = float32(release(snap(acc[j], g.Gamma), src.tableGaussian(d.table), g.Gamma) * inv)
		}
	})
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
