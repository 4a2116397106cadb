package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
)

// noNoise is the mechanism without its noise: it exposes the clipped sum
// an adversary's data move, which the noise is calibrated to (tests only).
type noNoise struct{ aggregator }

func (noNoise) NoiseSums(...[]float32) error { return nil }

// faces is in-memory data with people.
type faces struct {
	x   []float32
	l   []int32
	ids []int
	n   int
}

func (f faces) Len() int           { return len(f.l) }
func (f faces) Identity(i int) int { return f.ids[i] }
func (f faces) Identities() int    { return f.n }
func (f faces) Batch(idx []int, _ *rand.Rand) ([]float32, []int32, error) {
	var x []float32
	var l []int32
	for _, i := range idx {
		x = append(x, f.x[i*8:(i+1)*8]...)
		l = append(l, f.l[i])
	}
	return x, l, nil
}

// TestOnePersonMovesTheStepByAtMostC plays the adversary against the
// trainer's identity-level step: one person with six copies of an image
// (their clipped gradients align), stored interleaved with five other
// people's images so that a layout splitting people across micro-batches
// would clip them in parts. With q = 1 and the noise removed, the
// difference the person makes to the clipped sum must be at most C per
// identity; per example it is 6·C, the attack identity-level DP stops.
func TestOnePersonMovesTheStepByAtMostC(t *testing.T) {
	const clip, m = 1e-3, 6
	r := rand.New(rand.NewPCG(3, 4))
	var with, without faces
	target := make([]float32, 8)
	for j := range target {
		target[j] = float32(r.NormFloat64())
	}
	add := func(f *faces, x []float32, label int32, id int) {
		f.x = append(f.x, x...)
		f.l = append(f.l, label)
		f.ids = append(f.ids, id)
	}
	for k := 0; k < 15; k++ {
		x := make([]float32, 8)
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		add(&with, x, int32(k%3), 1+k%5)
		add(&without, x, int32(k%3), k%5)
		if k < m {
			add(&with, target, 2, 0)
		}
	}
	with.n, without.n = 6, 5
	for _, unit := range []Unit{UnitIdentity, UnitExample} {
		sums := func(f faces) []float64 {
			n := f.n
			if unit == UnitExample {
				n = f.Len()
			}
			mdl, err := arch.New(arch.Config{Kind: "head", In: 8, Hidden: 8, Embedding: 4})
			if err != nil {
				t.Fatal(err)
			}
			h, err := loss.New(mdl.Params(), loss.Config{Kind: "softmax", Classes: 3}.Defaults(), 4)
			if err != nil {
				t.Fatal(err)
			}
			mdl.Params().Init(1)
			tr, err := New(mdl, h, Options{Optimizer: "sgd", LearningRate: 1, MicroBatch: 8, DP: &DPOptions{Unit: unit, NoiseMultiplier: 1,
				Clip: clip, SamplingRate: 1, Delta: 1e-5, DatasetSize: n, Source: dp.NewSeededSource([32]byte{1})}})
			if err != nil {
				t.Fatal(err)
			}
			tr.dp.agg = noNoise{tr.dp.agg}
			var before []float32
			for i := 0; i < tr.params.Len(); i++ {
				before = append(before, tr.params.Values(i)...)
			}
			if _, err := tr.DPStep(f, nil); err != nil {
				t.Fatal(err)
			}
			var out []float64
			k := 0
			for i := 0; i < tr.params.Len(); i++ {
				for _, v := range tr.params.Values(i) {
					// θ' = θ − sum/(q·N): recover the clipped sum.
					out = append(out, float64(before[k]-v)*float64(n))
					k++
				}
			}
			return out
		}
		a, b := sums(with), sums(without)
		var d2 float64
		for j := range a {
			d2 += (a[j] - b[j]) * (a[j] - b[j])
		}
		d := math.Sqrt(d2)
		switch unit {
		case UnitIdentity:
			if d > clip*(1+1e-3) {
				t.Errorf("one person moved the identity-level clipped sum by %g > C = %g", d, clip)
			}
		case UnitExample:
			if d < (m-0.05)*clip {
				t.Errorf("per example the person moved the sum by %g, want m·C = %g (the attack lost its power)", d, m*clip)
			}
		}
	}
}
