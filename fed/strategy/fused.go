package strategy

import (
	"fmt"

	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/vec"
)

// SumApplier is a Strategy that can work out the next model straight
// from a round's running sum, without the mean as a model of its own:
// ApplySum(model, sum, state) returns exactly what Apply(model, mean,
// sum.Count, state) returns with mean = sum.Mean(), bit for bit, and the
// same refusals, in one pass over the values and one allocation (the
// next model) instead of three passes and two.
type SumApplier interface {
	ApplySum(model wire.Weights, sum *Sum, state wire.Weights) (next, newState wire.Weights, err error)
}

var _ SumApplier = fedAvg{}

// ApplySum is fedAvg's Apply of sum's mean, fused: each value of the next
// model is float32(model + η·float32(Σ/W)), the expression Mean and Apply
// evaluate in turn.
func (s fedAvg) ApplySum(model wire.Weights, sum *Sum, state wire.Weights) (wire.Weights, wire.Weights, error) {
	if sum.Count == 0 || !(sum.Weight > 0) {
		_, err := sum.Mean()
		return nil, nil, err
	}
	if err := model.SameLayout(sum.Layout); err != nil {
		return nil, nil, err
	}
	if n := model.Len(); len(sum.Values) != n {
		return nil, nil, fmt.Errorf("strategy: a sum of %d values for a model of %d", len(sum.Values), n)
	}
	lr := s.ServerLR(sum.Count)
	next := make(wire.Weights, len(model))
	vals := make([]float32, model.Len())
	k := 0
	for i, t := range model {
		out := vals[k : k+len(t.Values) : k+len(t.Values)]
		in := sum.Values[k : k+len(t.Values)]
		for j, m := range t.Values {
			if j%fusedBlock == 0 {
				vec.ClearUpper() // scalar float code stalls on a dirty upper state too
			}
			mean := float32(in[j] / sum.Weight)
			out[j] = float32(float64(m) + lr*float64(mean))
		}
		next[i] = wire.Tensor{Name: t.Name, Shape: append([]int(nil), t.Shape...), Values: out}
		k += len(t.Values)
	}
	return next, nil, nil
}

// fusedBlock is the values ApplySum works out between two clearings of
// the AVX registers' upper halves (vec.ClearUpper).
const fusedBlock = 8192
