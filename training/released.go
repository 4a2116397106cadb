package training

import "github.com/veil-privacy/veil/nn/train"

// State returns a copy of the optimiser state (moments, moving average,
// step count and privacy record).
func (s *Session) State() train.State { return s.tr.State() }

// RestoreReleased restores the optimiser state of a session stepped only
// by ApplyReleased (train.Trainer.RestoreReleased), after LoadWeights.
func (s *Session) RestoreReleased(st train.State) error { return s.tr.RestoreReleased(st) }

// Average returns a copy of the parameters' moving average (the weights
// Evaluate scores), or the parameters themselves without OptimOptions.EMA.
func (s *Session) Average() Weights {
	w := s.Weights()
	for i := range w.Values {
		if e := s.tr.EMAValues(i); e != nil {
			w.Values[i] = e
		}
	}
	return w
}
