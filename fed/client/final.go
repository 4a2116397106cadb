package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// NoisedDimensioner is a Trainer whose DP-SGD noises more coordinates than
// the model it sends back (parameters it keeps to itself, such as a local
// classifier whose gradients are clipped and noised with the model's): the
// client charges the mechanism on that many coordinates, not on the
// model's, so that the charge is the mechanism the trainer runs.
type NoisedDimensioner interface {
	NoisedDimension(model wire.Weights) (int, error)
}

// noisedDimension is the dimension of the mechanism the trainer runs on
// model: the model's size, or the trainer's own count if larger.
func (c *Client) noisedDimension(model wire.Weights) (int, error) {
	d, ok := c.o.Trainer.(NoisedDimensioner)
	if !ok {
		return model.Len(), nil
	}
	n, err := d.NoisedDimension(model)
	if err != nil {
		return 0, err
	}
	return max(n, model.Len()), nil
}

// LatestModel asks the coordinator for its current model version (after
// the run, the federation's result) and returns its weights, downloaded
// and checked like a round's model (sizes, digest, finite values) and
// kept in the client's folder.
func (c *Client) LatestModel(ctx context.Context) (wire.Weights, error) {
	st, err := c.api.Status(ctx, &fedpb.StatusRequest{ProtocolVersion: fedpb.ProtocolVersion})
	if err != nil {
		return nil, fmt.Errorf("client: asking the coordinator for its model: %w", err)
	}
	v := st.GetModelVersion()
	if v == "" {
		return nil, errors.New("client: the coordinator has no model")
	}
	return c.fetch(ctx, v)
}
