package train

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/veil-privacy/veil/eval"
)

// Data serves training batches.
type Data interface {
	Len() int
	// Batch returns the inputs and labels of examples idx, augmented with
	// rng when it is non-nil.
	Batch(idx []int, rng *rand.Rand) ([]float32, []int32, error)
}

// EpochOptions drive one pass over the data.
type EpochOptions struct {
	// Epoch numbers the pass (seeds the data order and augmentation).
	Epoch int
	// Batch is the batch size without DP (DP-SGD's batches are Poisson
	// samples of expected size q·N).
	Batch int
	// Seed seeds data order and augmentation (not privacy randomness:
	// DP-SGD samples with DPOptions.Source).
	Seed uint64
	// Augment turns on random crops and flips.
	Augment bool
	// Progress, if set, is called after each step.
	Progress func(step, steps int, loss float64)
}

// StepsPerEpoch is ⌈N/batch⌉ without DP and ⌈1/q⌉ with DP.
func (t *Trainer) StepsPerEpoch(n, batch int) int {
	if t.opts.DP != nil {
		return int(math.Ceil(1 / t.opts.DP.SamplingRate))
	}
	return (n + batch - 1) / batch
}

// Epoch runs one pass and returns the mean step loss. Without DP the data
// are shuffled with a generator seeded by (Seed, Epoch), so a resumed run
// at an epoch boundary repeats exactly; with DP each of the ⌈1/q⌉ steps is
// a DPStep (a Poisson sample of examples or identities drawn by the
// trainer).
func (t *Trainer) Epoch(d Data, o EpochOptions) (float64, error) {
	n := d.Len()
	if n == 0 {
		return 0, errors.New("train: empty training set")
	}
	if t.opts.DP == nil && o.Batch <= 0 {
		return 0, fmt.Errorf("train: batch size must be positive, got %d", o.Batch)
	}
	if t.dp != nil {
		if _, err := t.dp.checkData(d); err != nil {
			return 0, err
		}
	}
	var order []int
	if t.dp == nil {
		order = rand.New(rand.NewPCG(o.Seed, uint64(o.Epoch))).Perm(n)
	}
	steps := t.StepsPerEpoch(n, o.Batch)
	var sum float64
	var counted int
	for s := 0; s < steps; s++ {
		var aug *rand.Rand
		if o.Augment {
			aug = rand.New(rand.NewPCG(o.Seed^0xa5a5, uint64(o.Epoch)<<32|uint64(s)))
		}
		var r StepResult
		var err error
		if t.dp != nil {
			r, err = t.DPStep(d, aug)
		} else {
			var x []float32
			var l []int32
			if x, l, err = d.Batch(order[s*o.Batch:min((s+1)*o.Batch, n)], aug); err != nil {
				return 0, err
			}
			r, err = t.Step(x, l)
		}
		if err != nil {
			return 0, err
		}
		if r.Examples > 0 {
			sum += r.Loss
			counted++
		}
		if o.Progress != nil {
			o.Progress(s+1, steps, r.Loss)
		}
	}
	if counted == 0 {
		return 0, nil
	}
	return sum / float64(counted), nil
}

// VerifyAccuracy picks the similarity threshold that maximises accuracy on
// the tuning pairs and returns the accuracy of that threshold on the test
// pairs (same[i] says pair i is one person; a pair is called "same" when
// its similarity is at least the threshold).
func VerifyAccuracy(tuneSim []float64, tuneSame []bool, testSim []float64, testSame []bool) (acc, threshold float64, err error) {
	if len(tuneSim) == 0 || len(tuneSim) != len(tuneSame) || len(testSim) == 0 || len(testSim) != len(testSame) {
		return 0, 0, errors.New("train: verification needs non-empty, matching similarity and label lists")
	}
	thr, _ := eval.Scores{Score: tuneSim, Same: tuneSame}.BestThreshold()
	return eval.Scores{Score: testSim, Same: testSame}.Accuracy(thr), thr, nil
}
