package local

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// Split partitions the training examples of d among clients by identity
// (dataset.PartitionIdentities: disjoint identities per client, evenly or
// in Dirichlet shares) and returns each client's data. The clients share
// d's evaluation pairs, which are never trained on.
func Split(d *training.Data, o dataset.PartitionOptions) ([]*training.Data, error) {
	id, ok := d.Train.(train.Identified)
	if !ok || d.Identities == 0 {
		return nil, errors.New("local: partitioning by identity needs training data labelled by identity")
	}
	identity := make([]int, d.Train.Len())
	for i := range identity {
		identity[i] = id.Identity(i)
	}
	parts, err := dataset.PartitionIdentities(id.Identities(), o)
	if err != nil {
		return nil, err
	}
	ex, err := dataset.ExamplesOf(identity, parts)
	if err != nil {
		return nil, err
	}
	out := make([]*training.Data, len(ex))
	for k, e := range ex {
		if out[k], err = Subset(d, e); err != nil {
			return nil, fmt.Errorf("local: client %d: %w", k+1, err)
		}
	}
	return out, nil
}

// Subset returns the data of the training examples examples of d (indices
// into d.Train, increasing): a client's partition. Identities are
// renumbered densely in the order they first appear; under distillation
// (d.Targets set) an example's label is its index in the subset and its
// target comes along. The evaluation pairs are d's.
func Subset(d *training.Data, examples []int) (*training.Data, error) {
	if len(examples) == 0 {
		return nil, errors.New("no training examples")
	}
	id, ok := d.Train.(train.Identified)
	if !ok {
		return nil, errors.New("a partition needs training data labelled by identity")
	}
	v := &view{full: d.Train, idx: examples, distill: d.Targets != nil, class: map[int32]int32{}}
	local := map[int]int{}
	for _, i := range examples {
		if i < 0 || i >= d.Train.Len() {
			return nil, fmt.Errorf("example %d outside [0, %d)", i, d.Train.Len())
		}
		g := id.Identity(i)
		l, seen := local[g]
		if !seen {
			l = len(local)
			local[g] = l
		}
		v.ids = append(v.ids, l)
	}
	v.people = len(local)
	out := &training.Data{Name: d.Name, Public: d.Public, Train: v, Identities: v.people, Pairs: d.Pairs}
	if len(d.People) == d.Train.Len() && len(d.ImageIDs) == d.Train.Len() {
		for _, i := range examples {
			out.People, out.ImageIDs = append(out.People, d.People[i]), append(out.ImageIDs, d.ImageIDs[i])
		}
	}
	if v.distill {
		if len(d.Targets) != d.Train.Len() {
			return nil, fmt.Errorf("%d distillation targets for %d examples", len(d.Targets), d.Train.Len())
		}
		for _, i := range examples {
			out.Targets = append(out.Targets, d.Targets[i])
		}
	} else {
		// Class labels are identities: renumber them as the identities.
		_, labels, err := d.Train.Batch(examples, nil)
		if err != nil {
			return nil, err
		}
		for k, l := range labels {
			v.class[l] = int32(v.ids[k])
		}
	}
	return out, nil
}

// view is a subset of a training set's examples.
type view struct {
	full    training.Examples
	idx     []int // indices into full
	ids     []int // each example's identity, dense in [0, people)
	people  int
	distill bool            // labels are example indices
	class   map[int32]int32 // full class label → subset class (not distill)
}

// Len implements train.Data.
func (v *view) Len() int { return len(v.idx) }

// Batch implements train.Data: the full set's inputs with the subset's
// labels.
func (v *view) Batch(idx []int, rng *rand.Rand) ([]float32, []int32, error) {
	m := make([]int, len(idx))
	for k, i := range idx {
		if i < 0 || i >= len(v.idx) {
			return nil, nil, fmt.Errorf("local: example %d outside [0, %d)", i, len(v.idx))
		}
		m[k] = v.idx[i]
	}
	x, labels, err := v.full.Batch(m, rng)
	if err != nil {
		return nil, nil, err
	}
	for k := range labels {
		if v.distill {
			labels[k] = int32(idx[k])
		} else {
			labels[k] = v.class[labels[k]]
		}
	}
	return x, labels, nil
}

// Classes is the number of targets under distillation, else of people.
func (v *view) Classes() int {
	if v.distill {
		return len(v.idx)
	}
	return v.people
}

// Identity implements train.Identified.
func (v *view) Identity(i int) int { return v.ids[i] }

// Identities implements train.Identified.
func (v *view) Identities() int { return v.people }
