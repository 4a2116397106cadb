package strategy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/veil-privacy/veil/fed/wire"
)

// FCLayer names the tensors of one fully connected layer whose units
// thinning drops, each unit with its connections (Irene Section III.C,
// Fig. 6): a unit is a column of Weight ([in, units]), an entry of Bias
// ([units], optional) and a row of Next ([units, out], the following
// layer's weights fed by the units, optional). Units are other tensors of
// one value per unit (shape [units]), such as a PReLU activation's slopes,
// thinned with the layer.
type FCLayer struct {
	Weight, Bias, Next string
	Units              []string
}

// FCLayers returns the fully connected layers of model that thinning may
// drop units of: each 2-D weight [in, units] but the last (the output
// layer's units are the model's outputs), with the 1-D tensors of its
// units that follow it before the next 2-D weight (the first is its bias,
// the others per-unit parameters such as a PReLU's slopes) and the next
// 2-D weight, which its units feed, when their sizes match.
func FCLayers(model wire.Weights) []FCLayer {
	var mats []int
	for i, t := range model {
		if len(t.Shape) == 2 {
			mats = append(mats, i)
		}
	}
	var out []FCLayer
	for k := 0; k+1 < len(mats); k++ {
		w := model[mats[k]]
		units := w.Shape[1]
		l := FCLayer{Weight: w.Name}
		for i := mats[k] + 1; i < mats[k+1] && len(model[i].Shape) == 1 && model[i].Shape[0] == units; i++ {
			if l.Bias == "" {
				l.Bias = model[i].Name
			} else {
				l.Units = append(l.Units, model[i].Name)
			}
		}
		if next := model[mats[k+1]]; next.Shape[0] == units {
			l.Next = next.Name
		}
		out = append(out, l)
	}
	return out
}

// ThinOptions configures dropout-thinned models.
type ThinOptions struct {
	// Drop is the probability p ∈ [0, 1) that a unit is left out of a
	// served model; each unit is kept with probability 1 − p,
	// independently, and at least one unit of each layer is kept.
	Drop float64
	// Layers are the fully connected layers thinned. Other tensors are
	// served whole.
	Layers []FCLayer
}

// Thinned is one served thinned model and what the coordinator keeps to
// merge the update it comes back with.
type Thinned struct {
	// Model is the thinned model sent to the client.
	Model wire.Weights
	// Kept lists, per layer of ThinOptions.Layers, the kept units in
	// increasing order.
	Kept [][]int
	// keep[t][axis] lists the kept indices of tensor t along axis 0 or 1
	// (nil: all).
	keep  [][2][]int
	shape wire.Weights
}

// Thin draws a thinned model from model: each listed layer's units are
// kept with probability 1 − p, drawn from rng (an explicitly seeded
// generator, so a run can be replayed; this choice is not privacy noise).
func Thin(model wire.Weights, o ThinOptions, rng *rand.Rand) (*Thinned, error) {
	if !(o.Drop >= 0 && o.Drop < 1) {
		return nil, fmt.Errorf("strategy: dropout rate p must be in [0, 1), got %g", o.Drop)
	}
	if rng == nil {
		return nil, errors.New("strategy: thinning needs a seeded random generator")
	}
	if err := model.Validate(); err != nil {
		return nil, fmt.Errorf("strategy: thinning: %w", err)
	}
	var kept [][]int
	for _, l := range o.Layers {
		i := slices.IndexFunc(model, func(t wire.Tensor) bool { return t.Name == l.Weight })
		if i < 0 {
			return nil, fmt.Errorf("strategy: thinning: no weight tensor %q", l.Weight)
		}
		if len(model[i].Shape) != 2 {
			return nil, fmt.Errorf("strategy: thinning: weight %q has shape %v, want [in, units]", l.Weight, model[i].Shape)
		}
		units := model[i].Shape[1]
		var k []int
		for u := range units {
			if rng.Float64() >= o.Drop {
				k = append(k, u)
			}
		}
		if len(k) == 0 {
			k = []int{rng.IntN(units)}
		}
		kept = append(kept, k)
	}
	return ThinUnits(model, o.Layers, kept)
}

// ThinUnits is model thinned to the given units: kept[i] lists layer i's
// kept units, at least one, in increasing order (Thin draws them).
func ThinUnits(model wire.Weights, layers []FCLayer, kept [][]int) (*Thinned, error) {
	if err := model.Validate(); err != nil {
		return nil, fmt.Errorf("strategy: thinning: %w", err)
	}
	if len(kept) != len(layers) {
		return nil, fmt.Errorf("strategy: thinning: %d lists of kept units for %d layers", len(kept), len(layers))
	}
	index := map[string]int{}
	for i, t := range model {
		index[t.Name] = i
	}
	th := &Thinned{keep: make([][2][]int, len(model)), shape: model}
	set := func(name string, axis, units int, kept []int, what string) error {
		i, ok := index[name]
		if !ok {
			return fmt.Errorf("strategy: thinning: no tensor %q (%s)", name, what)
		}
		sh := model[i].Shape
		if len(sh) == 0 || len(sh) > 2 || (axis == 1 && len(sh) != 2) {
			return fmt.Errorf("strategy: thinning: tensor %q of shape %v cannot be the %s", name, sh, what)
		}
		if sh[axis] != units {
			return fmt.Errorf("strategy: thinning: tensor %q has %d along axis %d, want the layer's %d units", name, sh[axis], axis, units)
		}
		if th.keep[i][axis] != nil {
			return fmt.Errorf("strategy: thinning: axis %d of tensor %q is thinned by two layers", axis, name)
		}
		th.keep[i][axis] = kept
		return nil
	}
	for li, l := range layers {
		i, ok := index[l.Weight]
		if !ok {
			return nil, fmt.Errorf("strategy: thinning: no weight tensor %q", l.Weight)
		}
		if len(model[i].Shape) != 2 {
			return nil, fmt.Errorf("strategy: thinning: weight %q has shape %v, want [in, units]", l.Weight, model[i].Shape)
		}
		units := model[i].Shape[1]
		k := kept[li]
		if len(k) == 0 {
			return nil, fmt.Errorf("strategy: thinning: layer %q keeps no unit", l.Weight)
		}
		for j, u := range k {
			if u < 0 || u >= units || (j > 0 && u <= k[j-1]) {
				return nil, fmt.Errorf("strategy: thinning: layer %q's kept units must be increasing and in [0, %d)", l.Weight, units)
			}
		}
		k = slices.Clone(k)
		if err := set(l.Weight, 1, units, k, "weight"); err != nil {
			return nil, err
		}
		if l.Bias != "" {
			if err := set(l.Bias, 0, units, k, "bias"); err != nil {
				return nil, err
			}
		}
		if l.Next != "" {
			if err := set(l.Next, 0, units, k, "next layer"); err != nil {
				return nil, err
			}
		}
		for _, name := range l.Units {
			if err := set(name, 0, units, k, "per-unit parameter"); err != nil {
				return nil, err
			}
		}
		th.Kept = append(th.Kept, k)
	}
	th.Model = make(wire.Weights, len(model))
	for i, t := range model {
		th.Model[i] = gather(t, th.keep[i])
	}
	return th, nil
}

// axisIdx returns the kept indices along an axis of n (all when keep is nil).
func axisIdx(keep []int, n int) []int {
	if keep != nil {
		return keep
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// dims returns a 1-D or 2-D tensor's (rows, cols); a 1-D tensor is one
// column.
func dims(shape []int) (rows, cols int) {
	switch len(shape) {
	case 1:
		return shape[0], 1
	case 2:
		return shape[0], shape[1]
	}
	return 0, 0
}

func gather(t wire.Tensor, keep [2][]int) wire.Tensor {
	if keep[0] == nil && keep[1] == nil {
		return wire.Tensor{Name: t.Name, Shape: append([]int(nil), t.Shape...), Values: append([]float32(nil), t.Values...)}
	}
	rows, cols := dims(t.Shape)
	ri, ci := axisIdx(keep[0], rows), axisIdx(keep[1], cols)
	out := wire.Tensor{Name: t.Name, Values: make([]float32, 0, len(ri)*len(ci))}
	if len(t.Shape) == 1 {
		out.Shape = []int{len(ri)}
	} else {
		out.Shape = []int{len(ri), len(ci)}
	}
	for _, r := range ri {
		for _, c := range ci {
			out.Values = append(out.Values, t.Values[r*cols+c])
		}
	}
	return out
}

// Merge lays an update of the thinned model (a difference or gradient of
// Model's layout) out as an update of the full model: the kept units'
// values where they belong and zero for every dropped unit's parameters,
// so applying it (FedAvg, FedBuff, EASGD) changes only the kept units. An
// update of another layout or not finite is refused.
func (th *Thinned) Merge(update wire.Weights) (wire.Weights, error) {
	if err := th.Model.SameLayout(update); err != nil {
		return nil, fmt.Errorf("strategy: thinned update: %w", err)
	}
	if err := update.CheckFinite(); err != nil {
		return nil, fmt.Errorf("strategy: thinned update: %w", err)
	}
	out := make(wire.Weights, len(th.shape))
	for i, t := range th.shape {
		full := wire.Tensor{Name: t.Name, Shape: append([]int(nil), t.Shape...), Values: make([]float32, len(t.Values))}
		rows, cols := dims(t.Shape)
		if th.keep[i][0] == nil && th.keep[i][1] == nil {
			copy(full.Values, update[i].Values)
		} else {
			ri, ci := axisIdx(th.keep[i][0], rows), axisIdx(th.keep[i][1], cols)
			k := 0
			for _, r := range ri {
				for _, c := range ci {
					full.Values[r*cols+c] = update[i].Values[k]
					k++
				}
			}
		}
		out[i] = full
	}
	return out, nil
}

// KeptShare is the share of the model's values the thinned model holds
// (what a client downloads and uploads, relative to the full model).
func (th *Thinned) KeptShare() float64 {
	n := th.shape.Len()
	if n == 0 {
		return math.NaN()
	}
	return float64(th.Model.Len()) / float64(n)
}
