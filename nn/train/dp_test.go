package train_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// newFlat returns a trainer of a dense in→out layer under flatHead (zero
// gradient) with plain SGD at learning rate 1: a step moves every weight
// by exactly minus the noisy gradient estimate.
func newFlat(t *testing.T, in, out, micro int, d *train.DPOptions) (*train.Trainer, *denseModel) {
	t.Helper()
	m, err := newDenseModel(in, out)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(m, flatHead{}, train.Options{Optimizer: "sgd", LearningRate: 1, MicroBatch: micro, DP: d})
	if err != nil {
		t.Fatal(err)
	}
	return tr, m
}

// randomData returns n examples of per values, all labelled 0.
func randomData(n, per int, seed uint64) *memData {
	r := rand.New(rand.NewPCG(seed, 3))
	x := make([]float32, n*per)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return &memData{x: x, l: make([]int32, n), per: per}
}

// snapshot copies every parameter's values.
func snapshot(tr *train.Trainer) [][]float32 {
	var s [][]float32
	for i := 0; i < tr.Params().Len(); i++ {
		s = append(s, slices.Clone(tr.Params().Values(i)))
	}
	return s
}

// moments returns the mean and standard deviation of the change of every
// parameter value since before.
func moments(tr *train.Trainer, before [][]float32) (mean, std float64, n int) {
	var s, s2 float64
	for i, b := range before {
		for j, v := range tr.Params().Values(i) {
			d := float64(v) - float64(b[j])
			s += d
			s2 += d * d
			n++
		}
	}
	mean = s / float64(n)
	return mean, math.Sqrt(s2/float64(n) - mean*mean), n
}

// TestDPNoiseHasTheCalibratedScale runs DP-SGD steps under real noise on a
// model whose true gradient is zero, so each step moves the weights by the
// noise alone: N(0, σ²C²) per coordinate divided by the expected batch
// q·N. Each step's empirical standard deviation (4,160 coordinates, ~1%
// sampling error) must be σ·C/(q·N) within 4%, per example and per
// identity (N = number of people). Changing σ·C, dividing by the realised
// batch or by another N fails it.
func TestDPNoiseHasTheCalibratedScale(t *testing.T) {
	const sigma, clip = 2.0, 0.5
	cases := []struct {
		unit    train.Unit
		q       float64
		n       int // data set size in units
		samples int // examples
	}{
		{train.UnitExample, 0.25, 40, 40},
		{train.UnitIdentity, 0.5, 10, 40},
	}
	for _, c := range cases {
		d := randomData(c.samples, 64, 7)
		var data train.Data = d
		if c.unit == train.UnitIdentity {
			ids := make([]int, c.samples)
			for i := range ids {
				ids[i] = i % c.n
			}
			data = people{memData: d, ids: ids, n: c.n}
		}
		tr, _ := newFlat(t, 64, 64, 16, &train.DPOptions{Unit: c.unit, NoiseMultiplier: sigma, Clip: clip, SamplingRate: c.q,
			Delta: 1e-5, DatasetSize: c.n, Source: seeded(3)})
		want := sigma * clip / (c.q * float64(c.n))
		sizes := map[int]bool{}
		for step := 0; step < 6; step++ {
			before := snapshot(tr)
			r, err := tr.DPStep(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			sizes[r.Examples] = true
			mean, std, n := moments(tr, before)
			if math.Abs(std/want-1) > 0.04 {
				t.Errorf("%s step %d (%d examples): noise std %g, want σ·C/(q·N) = %g", c.unit, step, r.Examples, std, want)
			}
			if math.Abs(mean) > 5*want/math.Sqrt(float64(n)) {
				t.Errorf("%s step %d: noise mean %g, want 0 (std of the mean %g)", c.unit, step, mean, want/math.Sqrt(float64(n)))
			}
		}
		if len(sizes) < 2 {
			t.Errorf("%s: every step sampled the same number of examples %v; the test cannot tell q·N from the realised batch", c.unit, sizes)
		}
	}
}

// TestPoissonSamplingOfExamples runs Epoch under DP and checks what the
// data were asked for: per step, the number of examples is Binomial(N, q)
// (mean and variance within 4.5 standard errors), and every example is
// included independently at rate q (χ² over the examples). Fixed-size
// batches, another rate, or a sampler favouring some examples fail it.
func TestPoissonSamplingOfExamples(t *testing.T) {
	const n, q, epochs = 200, 0.1, 30
	d := randomData(n, 2, 11)
	tr, _ := newFlat(t, 2, 2, 32, &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 1, Clip: 1, SamplingRate: q, Delta: 1e-5,
		DatasetSize: n, Source: seeded(4)})
	var sizes []int
	for ep := 0; ep < epochs; ep++ {
		if _, err := tr.Epoch(d, train.EpochOptions{Epoch: ep, Progress: func(int, int, float64) {}}); err != nil {
			t.Fatal(err)
		}
	}
	if tr.Privacy().Steps != epochs*10 {
		t.Fatalf("%d DP steps, want %d (⌈1/q⌉ per epoch)", tr.Privacy().Steps, epochs*10)
	}
	count := make([]int, n)
	empty := tr.Privacy().Steps - len(d.requests) // steps that sampled nobody ask for nothing
	for range empty {
		sizes = append(sizes, 0)
	}
	for _, r := range d.requests {
		sizes = append(sizes, len(r))
		seen := map[int]bool{}
		for _, i := range r {
			if seen[i] {
				t.Fatalf("example %d sampled twice in one step", i)
			}
			seen[i] = true
			count[i]++
		}
	}
	checkBinomial(t, "examples per step", sizes, n, q)
	checkRates(t, "example", count, len(sizes), q)
}

// checkBinomial compares the mean and variance of draws with Binomial(n, q).
func checkBinomial(t *testing.T, what string, draws []int, n int, q float64) {
	t.Helper()
	k := float64(len(draws))
	var s, s2 float64
	for _, v := range draws {
		s += float64(v)
		s2 += float64(v) * float64(v)
	}
	mean := s / k
	variance := (s2 - k*mean*mean) / (k - 1)
	wantMean, wantVar := float64(n)*q, float64(n)*q*(1-q)
	if math.Abs(mean-wantMean) > 4.5*math.Sqrt(wantVar/k) {
		t.Errorf("%s: mean %g over %d steps, want q·N = %g", what, mean, len(draws), wantMean)
	}
	// Var of the sample variance ≈ 2σ⁴/(k−1) for a near-normal binomial.
	if math.Abs(variance-wantVar) > 4.5*wantVar*math.Sqrt(2/(k-1)) {
		t.Errorf("%s: variance %g over %d steps, want N·q·(1−q) = %g", what, variance, len(draws), wantVar)
	}
}

// checkRates checks that every unit was included about q·steps times:
// Σ (c − q·s)² / (s·q·(1−q)) is χ² with len(count) degrees of freedom.
func checkRates(t *testing.T, what string, count []int, steps int, q float64) {
	t.Helper()
	e := float64(steps) * q
	var chi float64
	for _, c := range count {
		chi += (float64(c) - e) * (float64(c) - e) / (e * (1 - q))
	}
	k := float64(len(count))
	if math.Abs(chi-k) > 5*math.Sqrt(2*k) {
		t.Errorf("%s inclusion: χ² = %g for %d %ss, want %g ± %g", what, chi, len(count), what, k, 5*math.Sqrt(2*k))
	}
}

// TestPoissonSamplingOfIdentities: under UnitIdentity the trainer samples
// people at rate q, and a sampled person brings min(images, cap) of their
// images, distinct and chosen uniformly; the number of people per step is
// Binomial(people, q).
func TestPoissonSamplingOfIdentities(t *testing.T) {
	const persons, q, capPer, steps = 60, 0.2, 4, 300
	var ids []int
	size := make([]int, persons)
	for p := 0; p < persons; p++ {
		size[p] = 1 + p%6
		for range size[p] {
			ids = append(ids, p)
		}
	}
	d := randomData(len(ids), 2, 12)
	data := people{memData: d, ids: ids, n: persons}
	tr, _ := newFlat(t, 2, 2, 8, &train.DPOptions{Unit: train.UnitIdentity, NoiseMultiplier: 1, Clip: 1, SamplingRate: q, Delta: 1e-5,
		DatasetSize: persons, MaxPerIdentity: capPer, Source: seeded(5)})
	for s := 0; s < steps; s++ {
		if _, err := tr.DPStep(data, nil); err != nil {
			t.Fatal(err)
		}
	}
	personCount := make([]int, persons)
	exampleCount := make([]int, len(ids))
	var perStep []int
	for range steps - len(d.requests) {
		perStep = append(perStep, 0)
	}
	for _, r := range d.requests {
		got := map[int]int{}
		for _, i := range r {
			got[ids[i]]++
			exampleCount[i]++
		}
		for p, c := range got {
			if c != min(size[p], capPer) {
				t.Fatalf("person %d brought %d of %d images, want min(images, cap %d)", p, c, size[p], capPer)
			}
			personCount[p]++
		}
		if len(r) != len(slices.Compact(slices.Sorted(slices.Values(r)))) {
			t.Fatal("an image sampled twice in one step")
		}
		perStep = append(perStep, len(got))
	}
	checkBinomial(t, "people per step", perStep, persons, q)
	checkRates(t, "person", personCount, steps, q)
	// A sampled six-image person brings each of their images with
	// probability 4/6: χ² over those images of their count given their
	// person's (a fixed choice of four scores about 30 per image).
	var chi float64
	var k int
	for i, p := range ids {
		if size[p] == 6 {
			e := float64(personCount[p]) * 4 / 6
			chi += (float64(exampleCount[i]) - e) * (float64(exampleCount[i]) - e) / (e / 3)
			k++
		}
	}
	if math.Abs(chi-float64(k)) > 5*math.Sqrt(2*float64(k)) {
		t.Errorf("images of six-image people: χ² = %g over %d images, want %d ± %g (each chosen with probability 4/6)", chi, k, k, 5*math.Sqrt(2*float64(k)))
	}
}

// TestStepRefusesGivenBatchUnderDP: DP-SGD's accounting assumes Poisson
// samples drawn by the trainer; a caller-chosen batch is refused.
func TestStepRefusesGivenBatchUnderDP(t *testing.T) {
	tr, _ := newFlat(t, 4, 2, 8, &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.5, Delta: 1e-5, DatasetSize: 8})
	d := randomData(8, 4, 1)
	if _, err := tr.Step(d.x, d.l); !errors.Is(err, train.ErrNotSampled) {
		t.Fatalf("Step under DP: err = %v, want ErrNotSampled", err)
	}
	if p := tr.Privacy(); p.Steps != 0 || p.NonPrivateSteps != 0 || tr.Steps() != 0 {
		t.Errorf("a refused step changed the record: %+v, %d steps", p, tr.Steps())
	}
}

// TestDPChecksTheDataSetSize: the expected batch q·N divides the noisy
// sum, so N must be the data's size in the privacy unit.
func TestDPChecksTheDataSetSize(t *testing.T) {
	d := randomData(30, 4, 1)
	ids := make([]int, 30)
	for i := range ids {
		ids[i] = i / 3
	}
	cases := []struct {
		name string
		unit train.Unit
		n    int
		data train.Data
		want string
	}{
		{"examples", train.UnitExample, 20, d, "20 examples, the data have 30"},
		{"identities", train.UnitIdentity, 30, people{memData: d, ids: ids, n: 10}, "30 identities, the data have 10"},
		{"no identities", train.UnitIdentity, 30, d, "which person"},
	}
	for _, c := range cases {
		tr, _ := newFlat(t, 4, 2, 8, &train.DPOptions{Unit: c.unit, NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.5, Delta: 1e-5, DatasetSize: c.n})
		if _, err := tr.Epoch(c.data, train.EpochOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Epoch error %v, want one saying %q", c.name, err, c.want)
		}
		if _, err := tr.DPStep(c.data, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DPStep error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// TestNonFiniteExampleUnderDP: one example with a NaN feature used to turn
// every weight into NaN; now it contributes nothing and training goes on.
func TestNonFiniteExampleUnderDP(t *testing.T) {
	x, l := batch(16, 8, 3, 4)
	for j := 0; j < 8; j++ {
		x[5*8+j] = float32(math.NaN())
	}
	x[9*8+2] = float32(math.Inf(1))
	for _, unit := range []train.Unit{train.UnitExample, train.UnitIdentity} {
		d := &memData{x: x, l: l, per: 8}
		var data train.Data = d
		if unit == train.UnitIdentity {
			ids := make([]int, 16)
			for i := range ids {
				ids[i] = i / 2
			}
			data = people{memData: d, ids: ids, n: 8}
		}
		n := map[train.Unit]int{train.UnitExample: 16, train.UnitIdentity: 8}[unit]
		tr := build(t, arch.Config{Kind: "head", In: 8, Hidden: 8}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "adam",
			LearningRate: 0.01, MicroBatch: 8, DP: &train.DPOptions{Unit: unit, NoiseMultiplier: 0.5, Clip: 1, SamplingRate: 1, Delta: 1e-5,
				DatasetSize: n, Source: seeded(6)}})
		for s := 0; s < 3; s++ {
			r, err := tr.DPStep(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
				t.Errorf("%s: reported loss %g", unit, r.Loss)
			}
		}
		for i := 0; i < tr.Params().Len(); i++ {
			for _, v := range tr.Params().Values(i) {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%s: parameter %s holds %g after DP steps with one non-finite example", unit, tr.Params().Spec(i).Name, v)
				}
			}
		}
	}
}

// TestEpsilonIsTheDPAccountants: the ε the trainer reports is package dp's
// accountant's for the trainer's own privacy event.
func TestEpsilonIsTheDPAccountants(t *testing.T) {
	tr, _ := newFlat(t, 4, 2, 8, &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 0.8, Clip: 1, SamplingRate: 0.3, Delta: 1e-6, DatasetSize: 20})
	d := randomData(20, 4, 1)
	if _, err := tr.Event(); err == nil {
		t.Error("an event before any step")
	}
	for s := 0; s < 7; s++ {
		if _, err := tr.DPStep(d, nil); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := tr.Event()
	if err != nil {
		t.Fatal(err)
	}
	// The mechanism is the discrete Gaussian on a grid; rounding to the
	// grid may lower the effective noise multiplier, never raise it.
	if ev.Kind != dp.KindSubsampledDiscreteGaussian || ev.Count != 7 || ev.SamplingRate != 0.3 || !(ev.NoiseMultiplier <= 0.8 && ev.NoiseMultiplier > 0.8*(1-1e-4)) {
		t.Errorf("event %+v, want 7 steps of the subsampled discrete Gaussian at q = 0.3, σ ≤ 0.8", ev)
	}
	a, err := dp.NewAccountant(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Add(ev); err != nil {
		t.Fatal(err)
	}
	want, _, err := a.Epsilon(1e-6)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Privacy().Epsilon; math.Abs(got-want) > 1e-9*want {
		t.Errorf("trainer's ε %g, the accountant's %g", got, want)
	}
}
