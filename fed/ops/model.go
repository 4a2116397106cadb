package ops

import (
	"errors"
	"fmt"
	"slices"

	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
)

// WeightsFromCheckpoint returns a veil train checkpoint's parameters as
// federation weights: one tensor per stored parameter, named and shaped as
// the trainer names them (the names training.Session.Weights uses), in the
// stored order. These are the parameters themselves, not their moving
// average: federated training continues from what the optimiser holds.
func WeightsFromCheckpoint(c *checkpoint.Checkpoint) (wire.Weights, error) {
	if len(c.Header.Params) == 0 || len(c.Header.Params) != len(c.Values) {
		return nil, fmt.Errorf("the checkpoint names %d parameters and holds %d", len(c.Header.Params), len(c.Values))
	}
	w := make(wire.Weights, len(c.Values))
	for i, p := range c.Header.Params {
		w[i] = wire.Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), Values: slices.Clone(c.Values[i])}
	}
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("the checkpoint's parameters: %w", err)
	}
	if err := w.CheckFinite(); err != nil {
		return nil, fmt.Errorf("the checkpoint's parameters: %w", err)
	}
	return w, nil
}

// CheckpointFromWeights returns a checkpoint of the model template
// describes (its architecture, loss and parameter names) holding the
// weights w, which must have the template's layout, with a fresh
// optimiser state and no moving average, and the given privacy record.
// The result is never marked public: federated weights have seen the
// clients' data.
func CheckpointFromWeights(template *checkpoint.Checkpoint, w wire.Weights, priv train.Privacy) (*checkpoint.Checkpoint, error) {
	init, err := WeightsFromCheckpoint(template)
	if err != nil {
		return nil, err
	}
	if err := init.SameLayout(w); err != nil {
		return nil, fmt.Errorf("the federated model does not fit the initial checkpoint: %w", err)
	}
	h := template.Header
	h.Params = slices.Clone(h.Params)
	h.Step, h.Epoch, h.SecondMoments, h.EMA, h.Public = 0, 0, false, false, false
	h.Privacy = priv
	h.Data = "federated"
	c := &checkpoint.Checkpoint{Header: h}
	for _, t := range w {
		if len(t.Values) == 0 {
			return nil, errors.New("an empty tensor")
		}
		c.Values = append(c.Values, slices.Clone(t.Values))
		c.State.M = append(c.State.M, make([]float32, len(t.Values)))
	}
	c.State.Privacy = priv
	return c, nil
}
