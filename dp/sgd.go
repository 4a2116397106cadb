package dp

import (
	"fmt"
	"math"
)

// SGDConfig configures one DP-SGD aggregation (Abadi et al. 2016; Zhang et
// al., the multi-task paper's Section on DP-SGD; Irene Algorithm 2).
type SGDConfig struct {
	// ClipNorm C: each per-example gradient is scaled to L2 norm ≤ C.
	ClipNorm float64
	// NoiseMultiplier σ: the sum gets N(0, σ²C²) noise per coordinate.
	NoiseMultiplier float64
	// SamplingRate q of Poisson sampling, used for accounting.
	SamplingRate float64
	// ExpectedBatchSize q·N divides the noisy sum (dividing by the realised
	// batch size would leak it).
	ExpectedBatchSize float64
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
	return checkPositive("expected batch size", c.ExpectedBatchSize)
}

// DPSGD performs the engine-agnostic DP-SGD aggregation on flat gradient
// vectors. Not safe for concurrent use.
type DPSGD struct {
	cfg SGDConfig
	src *Source
	acc []float64
}

// NewDPSGD validates cfg and returns an aggregator; src is the noise source
// (nil means a fresh crypto/rand-seeded Source).
func NewDPSGD(cfg SGDConfig, src *Source) (*DPSGD, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("dp: DP-SGD config: %w", err)
	}
	if src == nil {
		var err error
		if src, err = NewSource(); err != nil {
			return nil, err
		}
	}
	return &DPSGD{cfg: cfg, src: src}, nil
}

// Config returns the aggregator's configuration.
func (d *DPSGD) Config() SGDConfig { return d.cfg }

// Aggregate clips each per-example gradient to L2 norm C, sums them, adds
// N(0, σ²C²) to every coordinate and divides by the expected batch size,
// writing the result to out (len(out) = gradient dimension). An empty batch
// (possible under Poisson sampling) yields pure noise. It returns the number
// of gradients that were actually scaled down. Gradients with NaN or
// infinite entries are refused.
func (d *DPSGD) Aggregate(perExample [][]float32, out []float32) (clipped int, err error) {
	dim := len(out)
	if dim == 0 {
		return 0, fmt.Errorf("dp: DP-SGD: output vector is empty")
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
	d.src.AddGaussian64(acc, d.cfg.NoiseMultiplier*d.cfg.ClipNorm)
	inv := 1 / d.cfg.ExpectedBatchSize
	for j, v := range acc {
		out[j] = float32(v * inv)
	}
	return clipped, nil
}

// Event returns the privacy cost of steps aggregations as an Event for an
// Accountant or Ledger.
func (d *DPSGD) Event(steps int) (Event, error) {
	return SubsampledGaussianEvent(d.cfg.SamplingRate, d.cfg.NoiseMultiplier, steps)
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
