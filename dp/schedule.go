package dp

import "fmt"

// The mechanisms a Schedule accounts.
const (
	// MechanismDiscrete is the discrete Gaussian (exact integer noise)
	// that DP-SGD in this module runs and its ledgers charge.
	MechanismDiscrete = "discrete"
	// MechanismGaussian is the continuous Gaussian of the papers and
	// Opacus.
	MechanismGaussian = "gaussian"
)

// Schedule is the mechanism of a Poisson-subsampled DP-SGD schedule as
// the RDP accountant sees it: the continuous Gaussian, or the discrete
// Gaussian, on DP-SGD's grid (SGDConfig) when Dimension, the number of
// noised coordinates, is positive, with the clip norm Clip. On the grid
// its ε is exactly what the trainer and its ledger charge.
type Schedule struct {
	Mechanism string
	Dimension int
	Clip      float64
}

// Validate checks the mechanism, and the grid's dimension and clip.
func (s Schedule) Validate() error {
	switch {
	case s.Mechanism != MechanismDiscrete && s.Mechanism != MechanismGaussian:
		return fmt.Errorf("dp: mechanism %q: want %s or %s", s.Mechanism, MechanismDiscrete, MechanismGaussian)
	case s.Dimension < 0:
		return fmt.Errorf("dp: dimension must not be negative, got %d", s.Dimension)
	case s.Dimension > 0 && s.Mechanism == MechanismGaussian:
		return fmt.Errorf("dp: a dimension describes DP-SGD's grid, which only the %s mechanism has", MechanismDiscrete)
	case s.Dimension > 0 && !(s.Clip > 0):
		return fmt.Errorf("dp: the clip norm must be positive, got %g", s.Clip)
	}
	return nil
}

// sgd is DP-SGD's configuration at noise multiplier sigma; ok is false
// off the grid. The expected batch size does not enter the account.
func (s Schedule) sgd(q, sigma float64) (SGDConfig, bool) {
	return SGDConfig{ClipNorm: s.Clip, NoiseMultiplier: sigma, SamplingRate: q, ExpectedBatchSize: 1, Dimension: s.Dimension}, s.Dimension > 0
}

// Epsilon accounts steps at sampling rate q and noise multiplier sigma by
// RDP at delta, returning ε, the minimising order and, on DP-SGD's grid,
// the effective noise multiplier (0 off it).
func (s Schedule) Epsilon(q, sigma float64, steps int, delta float64) (eps, order, effective float64, err error) {
	if err := s.Validate(); err != nil {
		return 0, 0, 0, err
	}
	if s.Mechanism == MechanismGaussian {
		eps, order, err = ScheduleEpsilon(q, sigma, steps, delta)
		return eps, order, 0, err
	}
	if cfg, ok := s.sgd(q, sigma); ok {
		if effective, err = cfg.EffectiveNoiseMultiplier(); err != nil {
			return 0, 0, 0, err
		}
		eps, order, err = SGDEpsilon(cfg, steps, delta)
		return eps, order, effective, err
	}
	eps, order, err = DiscreteScheduleEpsilon(q, sigma, steps, delta)
	return eps, order, 0, err
}

// NoiseMultiplier is the smallest noise multiplier for which steps at
// sampling rate q are (target, delta)-DP by the RDP accountant.
func (s Schedule) NoiseMultiplier(q float64, steps int, target, delta float64) (float64, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if s.Mechanism == MechanismGaussian {
		return NoiseMultiplier(q, steps, target, delta)
	}
	if cfg, ok := s.sgd(q, 1); ok {
		return SGDNoiseMultiplier(cfg, steps, target, delta)
	}
	return DiscreteNoiseMultiplier(q, steps, target, delta)
}
