package cli

import (
	"context"
	"time"

	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// ClippedSum makes --trainer fixed take part in distributed DP-SGD rounds:
// its clipped gradient sum is delta in every coordinate, after the
// training delay.
func (f fixedTrainer) ClippedSum(ctx context.Context, model wire.Weights, _ *fedpb.RoundConfig, _ ddp.Plan) ([]float32, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(f.delay):
	}
	g := make([]float32, model.Len())
	for i := range g {
		g[i] = f.delta
	}
	return g, nil
}
