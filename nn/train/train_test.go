package train_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

func build(t testing.TB, mc arch.Config, lc loss.Config, o train.Options) *train.Trainer {
	t.Helper()
	m, err := arch.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := loss.New(m.Params(), lc.Defaults(), 128)
	if err != nil {
		t.Fatal(err)
	}
	m.Params().Init(1)
	tr, err := train.New(m, h, o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func batch(n, per, classes int, seed uint64) ([]float32, []int32) {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n*per)
	l := make([]int32, n)
	for i := range l {
		l[i] = int32(r.IntN(classes))
		for j := 0; j < per; j++ {
			x[i*per+j] = float32(r.NormFloat64()*0.3) + float32(l[i])*float32((j%7)-3)*0.2
		}
	}
	return x, l
}

func TestHeadLearnsWithAndWithoutDP(t *testing.T) {
	mc := arch.Config{Kind: "head", In: 16, Hidden: 32}
	for _, private := range []bool{false, true} {
		o := train.Options{Optimizer: "adam", LearningRate: 0.01, MicroBatch: 16}
		x, l := batch(32, 16, 4, 9)
		d := &memData{x: x, l: l, per: 16}
		if private {
			// q = 1: every example in every step, so the loss curve is
			// comparable with the full-batch run; σ small enough to learn.
			o.DP = &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 0.3, Clip: 1, SamplingRate: 1, Delta: 1e-5, DatasetSize: 32,
				Source: seeded(1)}
		}
		tr := build(t, mc, loss.Config{Kind: "cosface", Classes: 4, Scale: 16}, o)
		step := func() train.StepResult {
			t.Helper()
			var r train.StepResult
			var err error
			if private {
				r, err = tr.DPStep(d, nil)
			} else {
				r, err = tr.Step(x, l)
			}
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		first := step()
		var last train.StepResult
		for i := 0; i < 30; i++ {
			last = step()
		}
		if !(last.Loss < first.Loss*0.7) {
			t.Errorf("dp=%v: loss %g → %g, want a clear decrease", private, first.Loss, last.Loss)
		}
		p := tr.Privacy()
		if private {
			want := mechanismEpsilon(t, dp.SGDConfig{ClipNorm: 1, NoiseMultiplier: 0.3, SamplingRate: 1, ExpectedBatchSize: 32, Dimension: tr.NumTrainable()}, 31, 1e-5)
			if p.Steps != 31 || p.NonPrivateSteps != 0 || p.Unit != train.UnitExample || math.Abs(p.Epsilon-want) > 1e-9*want || !p.Bounded() {
				t.Errorf("privacy = %+v, want 31 DP steps per example charged (ε=%g)", p, want)
			}
		} else if p.NonPrivateSteps != 31 || p.Bounded() {
			t.Errorf("privacy = %+v, want 31 non-private steps counted", p)
		}
	}
}

// mechanismEpsilon is ε at δ of steps of package dp's DP-SGD mechanism with
// these settings, by dp's accountant.
func mechanismEpsilon(t *testing.T, cfg dp.SGDConfig, steps int, delta float64) float64 {
	t.Helper()
	m, err := dp.NewDPSGD(cfg, dp.NewSeededSource([32]byte{}))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := m.Event(steps)
	if err != nil {
		t.Fatal(err)
	}
	a, err := dp.NewAccountant(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Add(ev); err != nil {
		t.Fatal(err)
	}
	eps, _, err := a.Epsilon(delta)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

func TestBudgetRefusesStep(t *testing.T) {
	const q, sigma = 0.1, 1.0
	mc := arch.Config{Kind: "head", In: 8, Hidden: 8}
	dim := build(t, mc, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 8}).NumTrainable()
	mech := dp.SGDConfig{ClipNorm: 1, NoiseMultiplier: sigma, SamplingRate: q, ExpectedBatchSize: q * 40, Dimension: dim}
	eps2, eps3 := mechanismEpsilon(t, mech, 2, 1e-5), mechanismEpsilon(t, mech, 3, 1e-5)
	o := train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 8, DP: &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: sigma, Clip: 1,
		SamplingRate: q, Delta: 1e-5, DatasetSize: 40, MaxEpsilon: (eps2 + eps3) / 2, Source: seeded(2)}}
	tr := build(t, mc, loss.Config{Kind: "softmax", Classes: 3}, o)
	x, l := batch(40, 8, 3, 1)
	d := &memData{x: x, l: l, per: 8}
	for i := 0; i < 2; i++ {
		if _, err := tr.DPStep(d, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.DPStep(d, nil); !errors.Is(err, train.ErrBudget) {
		t.Fatalf("third step: err = %v, want ErrBudget", err)
	}
	if p := tr.Privacy(); p.Steps != 2 || math.Abs(p.Epsilon-eps2) > 1e-9*eps2 {
		t.Errorf("privacy %+v, want 2 steps charged, ε = %g", p, eps2)
	}
}

func TestBadConfigurations(t *testing.T) {
	dpq := func(q float64) *train.DPOptions {
		return &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 1, Clip: 1, SamplingRate: q, Delta: 1e-5, DatasetSize: 10}
	}
	withDP := func(f func(*train.DPOptions)) *train.DPOptions {
		d := dpq(0.1)
		f(d)
		return d
	}
	cases := []struct {
		name string
		mc   arch.Config
		lc   loss.Config
		o    train.Options
	}{
		{"batch norm with DP", arch.Config{Kind: "lightface", Input: 32, Width: 0.25, Norm: "batch"}, loss.Config{Kind: "softmax", Classes: 3},
			train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4, DP: dpq(0.1)}},
		{"q zero", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4, DP: dpq(0)}},
		{"q above one", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4, DP: dpq(1.5)}},
		{"triplet with DP", arch.Config{Kind: "head"}, loss.Config{Kind: "triplet"}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4, DP: dpq(0.1)}},
		{"unknown optimizer", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "rmsprop", LearningRate: 0.1, MicroBatch: 4}},
		{"no privacy unit", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4,
			DP: withDP(func(d *train.DPOptions) { d.Unit = "" })}},
		{"unknown privacy unit", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4,
			DP: withDP(func(d *train.DPOptions) { d.Unit = "image" })}},
		{"cap above the micro-batch", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4,
			DP: withDP(func(d *train.DPOptions) { d.Unit, d.MaxPerIdentity = train.UnitIdentity, 5 })}},
		{"cap per example", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4,
			DP: withDP(func(d *train.DPOptions) { d.MaxPerIdentity = 2 })}},
		{"no data set size", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4,
			DP: withDP(func(d *train.DPOptions) { d.DatasetSize = 0 })}},
		{"infinite noise", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4,
			DP: withDP(func(d *train.DPOptions) { d.NoiseMultiplier = math.Inf(1) })}},
		{"all frozen", arch.Config{Kind: "head"}, loss.Config{Kind: "softmax", Classes: 3}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 4, GroupLR: map[string]float64{"": 0}}},
	}
	for _, tc := range cases {
		m, err := arch.New(tc.mc)
		if err != nil {
			t.Fatal(err)
		}
		h, err := loss.New(m.Params(), tc.lc.Defaults(), 128)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := train.New(m, h, tc.o); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestFrozenGroupDoesNotMove(t *testing.T) {
	m, err := arch.New(arch.Config{Kind: "head", In: 8, Hidden: 8})
	if err != nil {
		t.Fatal(err)
	}
	h, err := loss.New(m.Params(), loss.Config{Kind: "softmax", Classes: 3}, 128)
	if err != nil {
		t.Fatal(err)
	}
	p := m.Params()
	p.Init(2)
	p.SetGroup("fc1/", "backbone")
	i, _ := p.Index("fc1/w")
	j, _ := p.Index("fc2/w")
	before := append([]float32(nil), p.Values(i)...)
	before2 := append([]float32(nil), p.Values(j)...)
	tr, err := train.New(m, h, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 8, GroupLR: map[string]float64{"backbone": 0}})
	if err != nil {
		t.Fatal(err)
	}
	x, l := batch(8, 8, 3, 3)
	if _, err := tr.Step(x, l); err != nil {
		t.Fatal(err)
	}
	for k := range before {
		if p.Values(i)[k] != before[k] {
			t.Fatal("frozen fc1/w changed")
		}
	}
	moved := false
	for k := range before2 {
		moved = moved || p.Values(j)[k] != before2[k]
	}
	if !moved {
		t.Error("trainable fc2/w did not change")
	}
}

func benchStep(b *testing.B, input int, private bool) {
	o := train.Options{Optimizer: "sgd", LearningRate: 0.01, Momentum: 0.9, MicroBatch: 32}
	x, l := batch(32, input*input*3, 100, 1)
	// Under DP, q = 1 on 32 examples: every step samples all of them, one
	// full micro-batch, like the non-private step.
	d := &memData{x: x, l: l, per: input * input * 3}
	if private {
		o.DP = &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 1, Clip: 1, SamplingRate: 1, Delta: 1e-5, DatasetSize: 32}
	}
	tr := build(b, arch.Config{Kind: "lightface", Input: input, Width: 0.25, Norm: "group"}, loss.Config{Kind: "arcface", Classes: 100}, o)
	step := func() {
		var err error
		if private {
			_, err = tr.DPStep(d, nil)
		} else {
			_, err = tr.Step(x, l)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	step()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step()
	}
	b.ReportMetric(float64(32*b.N)/b.Elapsed().Seconds(), "images/s")
}

func BenchmarkStep64(b *testing.B)    { benchStep(b, 64, false) }
func BenchmarkStep64DP(b *testing.B)  { benchStep(b, 64, true) }
func BenchmarkStep112(b *testing.B)   { benchStep(b, 112, false) }
func BenchmarkStep112DP(b *testing.B) { benchStep(b, 112, true) }

func TestVerifyAccuracy(t *testing.T) {
	tune := []float64{0.1, 0.2, 0.6, 0.7, 0.4}
	tuneSame := []bool{false, false, true, true, false}
	test := []float64{0.55, 0.3, 0.9, 0.45}
	testSame := []bool{true, false, true, true}
	acc, thr, err := train.VerifyAccuracy(tune, tuneSame, test, testSame)
	if err != nil {
		t.Fatal(err)
	}
	if thr != 0.5 || acc != 0.75 {
		t.Errorf("accuracy %g at threshold %g, want 0.75 at 0.5", acc, thr)
	}
	if _, _, err := train.VerifyAccuracy(nil, nil, test, testSame); err == nil {
		t.Error("no error for empty tuning pairs")
	}
}

// TestNoiseForTargetIsTheTrainersMechanism calibrates σ for a target ε and
// runs that many DP steps: the trainer must report at most the target, and
// a σ 0.1% lower must exceed it (the calibration is tight).
func TestNoiseForTargetIsTheTrainersMechanism(t *testing.T) {
	const steps, target = 12, 3.0
	m, err := newDenseModel(6, 5)
	if err != nil {
		t.Fatal(err)
	}
	m.Params().SetGroup("d/b", "frozen")
	groups := map[string]float64{"frozen": 0}
	dim := train.NoisedDimension(m.Params(), groups)
	if dim != 6*5 {
		t.Fatalf("noised dimension %d, want 30 (the bias is frozen)", dim)
	}
	o := train.DPOptions{Unit: train.UnitExample, Clip: 0.7, SamplingRate: 0.4, Delta: 1e-5, DatasetSize: 10, Source: seeded(8)}
	sigma, err := train.NoiseForTarget(o, dim, steps, target)
	if err != nil {
		t.Fatal(err)
	}
	o.NoiseMultiplier = sigma
	tr, err := train.New(m, flatHead{}, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 8, GroupLR: groups, DP: &o})
	if err != nil {
		t.Fatal(err)
	}
	if tr.NumTrainable() != dim {
		t.Errorf("trainer noises %d coordinates, NoisedDimension said %d", tr.NumTrainable(), dim)
	}
	d := randomData(10, 6, 2)
	for range steps {
		if _, err := tr.DPStep(d, nil); err != nil {
			t.Fatal(err)
		}
	}
	if eps := tr.Privacy().Epsilon; !(eps <= target && eps > 0.99*target) {
		t.Errorf("after %d steps at the calibrated σ = %g: ε = %g, want at most and close to %g", steps, sigma, eps, target)
	}
	ev, err := tr.EventOf(steps)
	if err != nil {
		t.Fatal(err)
	}
	ev.NoiseMultiplier *= 0.999
	a, err := dp.NewAccountant(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Add(ev); err != nil {
		t.Fatal(err)
	}
	if eps, _, err := a.Epsilon(1e-5); err != nil || !(eps > target) {
		t.Errorf("σ 0.1%% below the calibrated one gives ε = %g (err %v), want above %g: the calibration is not tight", eps, err, target)
	}
	if _, err := train.NoiseForTarget(o, 0, steps, target); err == nil {
		t.Error("calibration for zero noised coordinates accepted")
	}
}

func TestEMAFollowsItsRecurrence(t *testing.T) {
	mc := arch.Config{Kind: "head", In: 16, Hidden: 32}
	const decay = 0.95
	tr := build(t, mc, loss.Config{Kind: "cosface", Classes: 4, Scale: 16}, train.Options{Optimizer: "adam", LearningRate: 0.01, MicroBatch: 16, EMA: decay})
	p := tr.Params()
	want := make([][]float64, p.Len())
	for i := range want {
		for _, v := range p.Values(i) {
			want[i] = append(want[i], float64(v))
		}
	}
	x, l := batch(32, 16, 4, 9)
	for step := 0; step < 40; step++ {
		if _, err := tr.Step(x, l); err != nil {
			t.Fatal(err)
		}
		d := min(decay, float64(1+step+1)/float64(10+step+1))
		for i := range want {
			for j, v := range p.Values(i) {
				want[i][j] = d*want[i][j] + (1-d)*float64(v)
			}
		}
	}
	moved := false
	for i := range want {
		got := tr.EMAValues(i)
		for j := range got {
			if math.Abs(float64(got[j])-want[i][j]) > 1e-5 {
				t.Fatalf("EMA of %s[%d] = %g, want %g", p.Spec(i).Name, j, got[j], want[i][j])
			}
			if got[j] != p.Values(i)[j] {
				moved = true
			}
		}
	}
	if !moved {
		t.Error("the moving average equals the last iterate")
	}
	m, err := arch.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := loss.New(m.Params(), loss.Config{Kind: "cosface", Classes: 4, Scale: 16}.Defaults(), 128)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float64{1, -0.1, math.NaN()} {
		if _, err := train.New(m, h, train.Options{Optimizer: "sgd", LearningRate: 0.1, MicroBatch: 1, EMA: bad}); err == nil {
			t.Errorf("EMA decay %g accepted", bad)
		}
	}
}
