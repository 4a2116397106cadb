package train

import (
	"errors"
	"fmt"
)

// RestoreReleased sets the optimiser state of a trainer stepped only by
// ApplyReleased (a distributed DP-SGD server, whose ε comes from the
// clients' mechanism, not this trainer's accountant), after the
// parameters were loaded: the moments, the moving average (nil: it
// restarts at the current parameters), the step count and the privacy
// record exactly as s holds them, so that the next ApplyReleased takes the
// very step an uninterrupted trainer would. It refuses a state whose
// weights took a step outside DP (the record would not bound them) or that
// names another unit, clip, sampling rate or δ than this trainer's.
func (t *Trainer) RestoreReleased(s State) error {
	d := t.opts.DP
	if d == nil {
		return errors.New("train: RestoreReleased needs DP options")
	}
	p := s.Privacy
	switch {
	case len(s.M) != len(t.m) || len(s.V) != len(t.v):
		return fmt.Errorf("train: restoring %d/%d moment tensors into a trainer with %d/%d", len(s.M), len(s.V), len(t.m), len(t.v))
	case s.EMA != nil && len(s.EMA) != len(t.m):
		return fmt.Errorf("train: restoring %d moving-average tensors into a trainer with %d parameters", len(s.EMA), len(t.m))
	case s.Step < 0 || p.NonPrivateSteps != 0 || s.Step != p.Steps:
		return fmt.Errorf("train: the state took %d steps, %d of them released under DP and %d without: only released steps resume here", s.Step, p.Steps, p.NonPrivateSteps)
	case p.Steps > 0 && (unitOf(p) != d.Unit || p.Clip != d.Clip || p.SamplingRate != d.SamplingRate || p.Delta != d.Delta || p.NoiseMultiplier != d.NoiseMultiplier):
		return fmt.Errorf("train: the state was released per %s at σ=%g C=%g q=%g δ=%g, not per %s at σ=%g C=%g q=%g δ=%g",
			unitOf(p), p.NoiseMultiplier, p.Clip, p.SamplingRate, p.Delta, d.Unit, d.NoiseMultiplier, d.Clip, d.SamplingRate, d.Delta)
	}
	for i := range t.m {
		if len(s.M[i]) != len(t.m[i]) || (t.v != nil && len(s.V[i]) != len(t.v[i])) || (s.EMA != nil && len(s.EMA[i]) != len(t.m[i])) {
			return fmt.Errorf("train: the state of parameter %q has the wrong size", t.params.Spec(i).Name)
		}
	}
	for i := range t.m {
		copy(t.m[i], s.M[i])
		if t.v != nil {
			copy(t.v[i], s.V[i])
		}
	}
	t.step = s.Step
	if p.Steps > 0 {
		t.privacy = p
	} else {
		t.privacy = Privacy{Unit: d.Unit, NoiseMultiplier: d.NoiseMultiplier, Clip: d.Clip, SamplingRate: d.SamplingRate, Delta: d.Delta}
	}
	if t.opts.EMA > 0 {
		t.resetEMA()
		if s.EMA != nil {
			for i := range t.ema {
				copy(t.ema[i], s.EMA[i])
			}
		}
	}
	return nil
}
