package train

import (
	"fmt"

	"github.com/veil-privacy/veil/dp"
)

// aggregator is what a DP-SGD step needs of package dp's mechanism: noise
// on the clipped sums (in place; their total length is fixed) and the
// privacy event of a number of steps, which accounts for whatever the
// noise does (dp.DPSGD's NoiseSums and Event).
type aggregator interface {
	NoiseSums(sums ...[]float32) error
	Event(steps int) (dp.Event, error)
}

// newAggregator returns package dp's DP-SGD mechanism for dim noised
// coordinates per step.
//
// Until dp.DPSGD offers NoiseSums (the trainer/dp contract), this is the
// continuous Gaussian mechanism on dp's CSPRNG Source, accounted as the
// Poisson-subsampled Gaussian.
func newAggregator(cfg dp.SGDConfig, dim int, src *dp.Source) (aggregator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if dim <= 0 {
		return nil, fmt.Errorf("noised dimension must be positive, got %d", dim)
	}
	return &gaussianSums{cfg: cfg, dim: dim, src: src}, nil
}

// gaussianSums adds N(0, σ²C²) to every coordinate.
type gaussianSums struct {
	cfg dp.SGDConfig
	dim int
	src *dp.Source
}

func (g *gaussianSums) NoiseSums(sums ...[]float32) error {
	n := 0
	for _, s := range sums {
		n += len(s)
	}
	if n != g.dim {
		return fmt.Errorf("%d coordinates to noise, want %d", n, g.dim)
	}
	for _, s := range sums {
		g.src.AddGaussian32(s, g.cfg.NoiseMultiplier*g.cfg.ClipNorm)
	}
	return nil
}

func (g *gaussianSums) Event(steps int) (dp.Event, error) {
	return dp.SubsampledGaussianEvent(g.cfg.SamplingRate, g.cfg.NoiseMultiplier, steps)
}
