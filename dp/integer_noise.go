package dp

import "fmt"

// DiscreteGaussianInts fills dst with independent draws of the discrete
// Gaussian N_Z(0, sigma²) over the integers, P(x) ∝ exp(−x²/(2·sigma²)),
// for an integer parameter 1 ≤ sigma ≤ 2^31, exactly (the samplers of
// AddGaussian64, without the grid: the caller's values are already on the
// integer lattice). This is the per-client noise of the distributed
// discrete Gaussian mechanism (see DistributedDiscreteGaussianRDP).
func (s *Source) DiscreteGaussianInts(dst []int64, sigma uint64) error {
	if sigma < 1 || sigma > maxGaussianScale {
		return fmt.Errorf("dp: the discrete Gaussian parameter must be an integer in [1, 2^31], got %d", sigma)
	}
	if len(dst) < tableMinLen {
		for i := range dst {
			dst[i] = s.gaussianOne(sigma)
		}
		return nil
	}
	t := s.gaussTableFor(sigma)
	for i := range dst {
		dst[i] = s.tableGaussian(t)
	}
	return nil
}
