package train

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/eval"
)

// RDP is the Accountant of package dp: Rényi DP of the Poisson-subsampled
// Gaussian mechanism over dp's default orders.
type RDP struct{}

// Epsilon implements Accountant.
func (RDP) Epsilon(q, sigma float64, steps int, delta float64) (float64, error) {
	eps, _, err := dp.ScheduleEpsilon(q, sigma, steps, delta)
	return eps, err
}

// NoiseForTarget returns the smallest noise multiplier reaching targetEps
// at δ after the given number of steps at sampling rate q.
func NoiseForTarget(q float64, steps int, targetEps, delta float64) (float64, error) {
	return dp.NoiseMultiplier(q, steps, targetEps, delta)
}

// Data serves training batches.
type Data interface {
	Len() int
	// Batch returns the inputs and labels of images idx, augmented with
	// rng when it is non-nil.
	Batch(idx []int, rng *rand.Rand) ([]float32, []int32, error)
}

// Sampler draws uniform numbers in [0,1) from a CSPRNG-seeded stream
// (Poisson sampling of DP-SGD must be secret and random).
type Sampler interface{ Float64() float64 }

// EpochOptions drive one pass over the data.
type EpochOptions struct {
	// Epoch numbers the pass (seeds the data order and augmentation).
	Epoch int
	// Batch is the batch size without DP.
	Batch int
	// Seed seeds data order and augmentation.
	Seed uint64
	// Augment turns on random crops and flips.
	Augment bool
	// Sampler draws DP-SGD's Poisson samples (required with DP).
	Sampler Sampler
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
// at an epoch boundary repeats exactly; with DP each step takes a Poisson
// sample (each image independently with probability q).
func (t *Trainer) Epoch(d Data, o EpochOptions) (float64, error) {
	n := d.Len()
	if n == 0 {
		return 0, errors.New("train: empty training set")
	}
	if t.opts.DP == nil && o.Batch <= 0 {
		return 0, fmt.Errorf("train: batch size must be positive, got %d", o.Batch)
	}
	if t.opts.DP != nil && o.Sampler == nil {
		return 0, errors.New("train: DP-SGD needs a CSPRNG sampler for Poisson sampling")
	}
	order := rand.New(rand.NewPCG(o.Seed, uint64(o.Epoch))).Perm(n)
	steps := t.StepsPerEpoch(n, o.Batch)
	var sum float64
	var counted int
	for s := 0; s < steps; s++ {
		var idx []int
		if t.opts.DP != nil {
			q := t.opts.DP.SamplingRate
			for i := 0; i < n; i++ {
				if o.Sampler.Float64() < q {
					idx = append(idx, i)
				}
			}
		} else {
			idx = order[s*o.Batch : min((s+1)*o.Batch, n)]
		}
		var aug *rand.Rand
		if o.Augment {
			aug = rand.New(rand.NewPCG(o.Seed^0xa5a5, uint64(o.Epoch)<<32|uint64(s)))
		}
		x, l, err := d.Batch(idx, aug)
		if err != nil {
			return 0, err
		}
		r, err := t.Step(x, l)
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
