package training

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training/trainingtest"
)

// headOptions are a small head run on tiny LFW data (trainingtest.WriteLFW
// in dir) with stand-in describers, writing ckpt.
func headOptions(dir, ckpt string) Options {
	return Options{
		Model:      ModelOptions{Kind: "head", Loss: "cosface"},
		Data:       DataOptions{Set: "lfw", LFW: dir, MinImages: 1, CentreCount: 1},
		Optim:      OptimOptions{Batch: 4, MicroBatch: 4, Optimizer: "adam", LearningRate: 0.01, WeightDecay: 5e-4, Seed: 1},
		Epochs:     2,
		Checkpoint: ckpt,
		// The ledger folder is shared by every run of a test (t.TempDir
		// folders are siblings), as it is by every command of a user.
		LedgerDir:  filepath.Join(filepath.Dir(dir), "ledgers"),
		Describers: Describers{Inputs: func() (eval.Describer, int, error) { return trainingtest.BlockDescriber(128), 128, nil }},
		Workers:    1,
	}
}

func run(t *testing.T, o Options) *Report {
	t.Helper()
	j, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := j.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOptionsRefused(t *testing.T) {
	base := headOptions("lfw", "x.ckpt")
	dpo := func(d DPOptions) *DPOptions {
		if d.Clip == 0 {
			d.Clip = 1
		}
		if d.Delta == 0 {
			d.Delta = 1e-5
		}
		return &d
	}
	cases := []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"unknown model", func(o *Options) { o.Model.Kind = "resnet" }, "unknown model"},
		{"unknown set", func(o *Options) { o.Data.Set = "celeba" }, "unknown training set"},
		{"mtfl needs distill", func(o *Options) { o.Data.Set, o.Data.MTFL = "mtfl", "m" }, "needs the distill loss"},
		{"mtfl has no identities", func(o *Options) {
			o.Model = ModelOptions{Kind: "lightface", Input: 32, Width: 0.25, Loss: "distill"}
			o.Data.Set, o.Data.MTFL = "mtfl", "m"
			o.DP = dpo(DPOptions{Unit: train.UnitIdentity, NoiseMultiplier: 1})
		}, "no identity labels"},
		{"init and resume", func(o *Options) { o.Init, o.Resume = "a", "b" }, "not both"},
		{"freeze too many", func(o *Options) { o.Model.Kind, o.Optim.FreezeBlocks = "lightface", 15 }, "in [0, 14]"},
		{"freeze a head", func(o *Options) { o.Optim.FreezeBlocks = 2 }, "applies to LightFace"},
		{"norm on a head", func(o *Options) { o.Model.Norm = "group" }, "no normalisation"},
		{"batch norm under DP", func(o *Options) {
			o.Model = ModelOptions{Kind: "lightface", Norm: "batch", Loss: "arcface"}
			o.DP = dpo(DPOptions{NoiseMultiplier: 1})
		}, "batch normalisation"},
		{"triplet under DP", func(o *Options) { o.Model.Loss = "triplet"; o.DP = dpo(DPOptions{NoiseMultiplier: 1}) }, "triplet"},
		{"neither σ nor ε", func(o *Options) { o.DP = dpo(DPOptions{}) }, "exactly one of"},
		{"both σ and ε", func(o *Options) { o.DP = dpo(DPOptions{NoiseMultiplier: 1, TargetEpsilon: 1}) }, "exactly one of"},
		{"sampling rate", func(o *Options) { o.DP = dpo(DPOptions{NoiseMultiplier: 1, SamplingRate: 1.5}) }, "(0, 1]"},
		{"DP without a ledger", func(o *Options) { o.DP = dpo(DPOptions{NoiseMultiplier: 1}); o.LedgerDir = "" }, "ledger folder"},
		{"unknown unit", func(o *Options) { o.DP = dpo(DPOptions{NoiseMultiplier: 1, Unit: "household"}) }, "unknown privacy unit"},
		{"budget below target", func(o *Options) { o.DP = dpo(DPOptions{TargetEpsilon: 8, BudgetEpsilon: 4}) }, "below the target"},
		{"cap with example unit", func(o *Options) {
			o.DP = dpo(DPOptions{NoiseMultiplier: 1, Unit: train.UnitExample, MaxPerIdentity: 2})
		}, "identity-level DP only"},
		{"ema", func(o *Options) { o.Optim.EMA = 1 }, "[0, 1)"},
		{"distill on descriptors", func(o *Options) { o.Model.Loss = "distill" }, "use the agegender features"},
		{"unknown features", func(o *Options) { o.Model.Features = "pixels" }, "unknown features"},
		{"features on LightFace", func(o *Options) {
			o.Model = ModelOptions{Kind: "lightface", Features: arch.HeadAgeGender, Loss: "arcface"}
		}, "LightFace reads images"},
		{"centre count", func(o *Options) { o.Model = ModelOptions{Kind: "lightface", Loss: "distill"}; o.Data.CentreCount = 0 }, "centre images must be positive"},
		{"no checkpoint", func(o *Options) { o.Checkpoint = "" }, "no checkpoint path"},
		{"overwrite init", func(o *Options) { o.Init = o.Checkpoint }, "would overwrite"},
		{"epochs", func(o *Options) { o.Epochs = 0 }, "epochs must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestValidateData: the options of a caller that only loads data (no
// run: no epochs, no checkpoint) are accepted and their defaults filled,
// while the model, optimiser and data settings are checked as by
// Validate, which still asks for what a run needs.
func TestValidateData(t *testing.T) {
	o := headOptions("lfw", "")
	o.Epochs = 0
	if err := o.ValidateData(); err != nil {
		t.Fatalf("data-only options: %v", err)
	}
	if o.Model.Features != "descriptor" || o.Model.Norm != "none" {
		t.Errorf("defaults not filled: %+v", o.Model)
	}
	for name, edit := range map[string]func(*Options){
		"unknown model": func(o *Options) { o.Model.Kind = "resnet" },
		"unknown set":   func(o *Options) { o.Data.Set = "celeba" },
		"no LFW":        func(o *Options) { o.Data.LFW = "" },
		"bad batch":     func(o *Options) { o.Optim.Batch = 0 },
		"triplet + DP": func(o *Options) {
			o.Model.Loss = "triplet"
			o.DP = &DPOptions{NoiseMultiplier: 1, Clip: 1, Delta: 1e-5}
		},
		"centre count 0": func(o *Options) { o.Model = ModelOptions{Kind: "lightface", Loss: "distill"}; o.Data.CentreCount = 0 },
	} {
		bad := headOptions("lfw", "")
		edit(&bad)
		if err := bad.ValidateData(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	full := headOptions("lfw", "")
	if err := full.Validate(); err == nil || !strings.Contains(err.Error(), "no checkpoint path") {
		t.Errorf("Validate without a checkpoint: %v", err)
	}
}

// TestRunRefusesBadData: errors that need the files.
func TestRunRefusesBadData(t *testing.T) {
	dir := t.TempDir()
	trainingtest.WriteLFW(t, dir)
	other := filepath.Join(t.TempDir(), "lightface.ckpt")
	m, err := arch.New(arch.Config{Kind: "lightface", Input: 32, Width: 0.25, Norm: "group"})
	if err != nil {
		t.Fatal(err)
	}
	st := train.State{}
	for i := 0; i < m.Params().Len(); i++ {
		st.M = append(st.M, make([]float32, m.Params().Spec(i).Size()))
	}
	if err := checkpoint.FromTrainer(checkpoint.Header{Model: m.Config(), Data: "lfw"}, m.Params(), st).Save(other); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"empty split", func(o *Options) { o.Data.MinImages = 100 }, "empty training split"},
		{"missing resume", func(o *Options) { o.Resume = filepath.Join(dir, "none.ckpt") }, "no such file"},
		{"resume another model", func(o *Options) { o.Resume = other }, "another model"},
		{"init another model", func(o *Options) { o.Init = other }, "another model"},
		{"DP from private weights", func(o *Options) {
			o.Model = ModelOptions{Kind: "lightface", Input: 32, Width: 0.25, Loss: "arcface"}
			o.Init = other
			o.DP = &DPOptions{NoiseMultiplier: 1, Clip: 1, Delta: 1e-5}
		}, "trained on private data"},
		{"no centre images", func(o *Options) {
			o.Model = ModelOptions{Kind: "lightface", Input: 32, Width: 0.25, Norm: "group", Loss: "distill"}
			o.Data.CentreImages = t.TempDir()
			o.Describers.Teacher = func() (eval.Describer, error) { return trainingtest.BlockDescriber(128), nil }
		}, "no JPEG or PNG images"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := headOptions(dir, filepath.Join(t.TempDir(), "x.ckpt"))
			tc.edit(&o)
			j, err := New(o)
			if err == nil {
				_, err = j.Run(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestHeadRun(t *testing.T) {
	dir := t.TempDir()
	trainingtest.WriteLFW(t, dir)
	ckpt := filepath.Join(t.TempDir(), "head.ckpt")
	o := headOptions(dir, ckpt)
	var epochs, steps int
	o.Progress = func(e Event) {
		switch e.Kind {
		case EventEpoch:
			epochs++
		case EventStep:
			steps++
		}
	}
	r := run(t, o)
	if r.Model.Kind != "head" || r.Images != 6 || r.Identities != 2 || r.Steps != 4 || r.DP || epochs != 2 || steps != 4 {
		t.Errorf("report %+v, %d epoch and %d step events: want head on 6 images of 2 identities, 2 epochs of 2 steps, no DP", r, epochs, steps)
	}
	// Two identities of near-constant vectors: the loss falls.
	if len(r.LossCurve) != 2 || math.IsNaN(r.FinalLoss) || !(r.LossCurve[1] < r.LossCurve[0]) {
		t.Errorf("loss curve %v: want two falling values", r.LossCurve)
	}
	// No DP on private data: no ε is stated, and the steps are counted.
	if r.Epsilon != nil || r.PrivacyUnit != "" || r.NonPrivateSteps != 4 || r.Ledger != "" {
		t.Errorf("report of a run without DP states ε %v unit %q, %d non-private steps, ledger %q", r.Epsilon, r.PrivacyUnit, r.NonPrivateSteps, r.Ledger)
	}
	// The stand-in describer separates the test identities: the raw
	// vectors score every test pair right.
	if r.DescriptorAccuracy == nil || *r.DescriptorAccuracy != 1 || r.InitAccuracy == nil || r.DevAccuracy < 0 || r.DevAccuracy > 1 {
		t.Errorf("accuracies: raw %v, initial %v, trained %v", r.DescriptorAccuracy, r.InitAccuracy, r.DevAccuracy)
	}
	for _, unit := range []train.Unit{train.UnitIdentity, train.UnitExample} {
		t.Run(string(unit), func(t *testing.T) {
			o := headOptions(dir, filepath.Join(t.TempDir(), "dp.ckpt"))
			o.Optim.EMA = 0.9
			o.DP = &DPOptions{Unit: unit, NoiseMultiplier: 1, SamplingRate: 0.5, Clip: 1, Delta: 1e-5}
			d := run(t, o)
			if !d.DP || d.Epsilon == nil || !(*d.Epsilon > 0) || d.PrivacyUnit != string(unit) || d.NoiseMult != 1 || d.Steps != 4 {
				t.Fatalf("DP report %+v", d)
			}
			wantN := 2 // people
			if unit == train.UnitExample {
				wantN = 6
			}
			if d.PrivacyUnits != wantN || d.Ledger != filepath.Join(o.LedgerDir, "lfw."+string(unit)+".ledger") || !(d.LedgerEpsilon >= *d.Epsilon) || d.BudgetEpsilon != d.LedgerEpsilon {
				t.Errorf("N = %d (want %d), ledger %q budget %g charged %g, ε %g: the default budget is what the run spends", d.PrivacyUnits, wantN, d.Ledger, d.BudgetEpsilon, d.LedgerEpsilon, *d.Epsilon)
			}
			// Resuming a finished run evaluates it again without an
			// initial accuracy and spends nothing.
			o.Resume = o.Checkpoint
			rr := run(t, o)
			if rr.InitAccuracy != nil || rr.DevAccuracy != d.DevAccuracy || *rr.Epsilon != *d.Epsilon || rr.LedgerEpsilon != d.LedgerEpsilon {
				t.Errorf("resumed report: initial accuracy %v, accuracy %v (want %v), ε %v (want %v)", rr.InitAccuracy, rr.DevAccuracy, d.DevAccuracy, *rr.Epsilon, *d.Epsilon)
			}
		})
	}
}

func TestPairAccuracy(t *testing.T) {
	lfw := dataset.LFW{Dir: "d"}
	vecs := map[string][]float32{
		lfw.ImagePath("A", 1): {1, 0}, lfw.ImagePath("A", 2): {0.9, 0.1},
		lfw.ImagePath("B", 1): {0, 1}, lfw.ImagePath("B", 2): {0.1, 0.9},
	}
	pairs := []dataset.Pair{{Name1: "A", Num1: 1, Name2: "A", Num2: 2, Same: true}, {Name1: "B", Num1: 1, Name2: "B", Num2: 2, Same: true},
		{Name1: "A", Num1: 1, Name2: "B", Num2: 1, Same: false}, {Name1: "A", Num1: 2, Name2: "B", Num2: 2, Same: false}}
	p := &Pairs{Tune: pairs, Test: pairs, lfw: lfw}
	acc, thr, err := p.accuracy(vecs)
	if err != nil || acc != 1 || !(thr > 0.2 && thr < 0.99) {
		t.Errorf("accuracy = %v, %v, %v; want 1 with a threshold between the classes", acc, thr, err)
	}
	p.Test = []dataset.Pair{{Name1: "C", Num1: 1, Name2: "A", Num2: 1, Same: false}}
	if _, _, err := p.accuracy(vecs); err == nil || !strings.Contains(err.Error(), "no vector") {
		t.Errorf("missing image: err = %v", err)
	}
}
