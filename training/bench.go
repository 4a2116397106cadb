package training

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// BenchClasses is the number of classes of the step benchmark's ArcFace
// loss.
const BenchClasses = 100

// StepBenchOptions configure a StepBench.
type StepBenchOptions struct {
	// Batch is the number of examples per step (at least 1).
	Batch int
	// Steps is the number of measured steps of each kind, after one
	// warm-up step (at least 1).
	Steps int
	// Width is LightFace's width multiplier, in (0, 4].
	Width float64
	// Engine runs the graphs; nil means a new default engine per trainer.
	Engine *engine.Engine
	// Progress receives one line per model measured; nil: none.
	Progress io.Writer
}

// StepBench times training steps of LightFace and of the embedding head,
// non-private and DP-SGD (veil bench train).
type StepBench struct {
	o StepBenchOptions
}

// NewStepBench checks o.
func NewStepBench(o StepBenchOptions) (*StepBench, error) {
	if o.Batch < 1 || o.Steps < 1 {
		return nil, fmt.Errorf("training bench: batch (%d) and steps (%d) must be at least 1", o.Batch, o.Steps)
	}
	if !(o.Width > 0 && o.Width <= 4) {
		return nil, fmt.Errorf("training bench: width %g is not in (0, 4]", o.Width)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return &StepBench{o: o}, nil
}

// StepBenchResult is one model's measurement.
type StepBenchResult struct {
	Input         int     `json:"input,omitempty"`
	Batch         int     `json:"batch"`
	Steps         int     `json:"steps"`
	ImagesPerS    float64 `json:"images_per_s"`
	DPImagesPerS  float64 `json:"dp_images_per_s"`
	DPRatio       float64 `json:"dp_ratio"`
	Params        int     `json:"params"`
	Model         string  `json:"model"`
	Configuration string  `json:"configuration"`
}

// StepBenchReport is veil bench train's report: LightFace at 64 and 112
// pixels, and the embedding head on the age/gender features.
type StepBenchReport struct {
	Head    StepBenchResult   `json:"head"`
	Results []StepBenchResult `json:"results"`
}

// Run measures LightFace at 64 and 112 pixels, then the head.
func (b *StepBench) Run() (*StepBenchReport, error) {
	rep := &StepBenchReport{}
	for _, input := range []int{64, 112} {
		r, err := b.model(arch.Config{Kind: "lightface", Input: input, Width: b.o.Width, Norm: "group"})
		if err != nil {
			return nil, err
		}
		r.Input = input
		r.Model = fmt.Sprintf("lightface width %g group norm, arcface %d classes", b.o.Width, BenchClasses)
		fmt.Fprintf(b.o.Progress, "input %d: %.1f images/s, DP-SGD %.1f images/s, ratio %.2f\n", input, r.ImagesPerS, r.DPImagesPerS, r.DPRatio)
		rep.Results = append(rep.Results, r)
	}
	head, err := b.model(arch.Config{Kind: "head", Features: arch.HeadAgeGender})
	if err != nil {
		return nil, err
	}
	head.Model = fmt.Sprintf("head on %s features (2048→256→128), arcface %d classes", arch.HeadAgeGender, BenchClasses)
	fmt.Fprintf(b.o.Progress, "head: %.1f examples/s, DP-SGD %.1f examples/s, ratio %.2f\n", head.ImagesPerS, head.DPImagesPerS, head.DPRatio)
	rep.Head = head
	return rep, nil
}

// trainer makes the trainer of model mc, with DP-SGD when dpOn, and
// returns it with the model's trainable parameters and input size.
func (b *StepBench) trainer(mc arch.Config, dpOn bool) (t *train.Trainer, params, per int, err error) {
	m, err := arch.New(mc)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("training bench: %w", err)
	}
	h, err := loss.New(m.Params(), loss.Config{Kind: "arcface", Classes: BenchClasses}.Defaults(), 128)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("training bench: %w", err)
	}
	m.Params().Init(1)
	per = 1
	for _, d := range m.InputDims() {
		per *= d
	}
	o := train.Options{Optimizer: "sgd", LearningRate: 0.01, Momentum: 0.9, WeightDecay: 5e-4, MicroBatch: b.o.Batch, Engine: b.o.Engine}
	if dpOn {
		src, err := dp.NewSource()
		if err != nil {
			return nil, 0, 0, fmt.Errorf("training bench: %w", err)
		}
		// q = 1 on the batch's examples: every DP step samples all of
		// them, one full micro-batch like the non-private step.
		o.DP = &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 1, Clip: 1, SamplingRate: 1, Delta: 1e-5, DatasetSize: b.o.Batch, Source: src}
	}
	t, err = train.New(m, h, o)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("training bench: %w", err)
	}
	return t, m.Params().NumTrainable(), per, nil
}

// model times non-private and DP-SGD steps of model mc on random inputs,
// alternating the two kinds so that both see the same machine load.
func (b *StepBench) model(mc arch.Config) (StepBenchResult, error) {
	batch, steps := b.o.Batch, b.o.Steps
	plain, n, per, err := b.trainer(mc, false)
	if err != nil {
		return StepBenchResult{}, err
	}
	private, _, _, err := b.trainer(mc, true)
	if err != nil {
		return StepBenchResult{}, err
	}
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, batch*per)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.5)
	}
	l := make([]int32, batch)
	for i := range l {
		l[i] = int32(r.IntN(BenchClasses))
	}
	data := benchData{x: x, l: l, per: per}
	// Warm up (compiles), then alternate.
	if err := benchSteps(plain, private, data); err != nil {
		return StepBenchResult{}, err
	}
	var tPlain, tDP time.Duration
	for s := 0; s < steps; s++ {
		t0 := time.Now()
		if _, err := plain.Step(x, l); err != nil {
			return StepBenchResult{}, fmt.Errorf("training bench: %w", err)
		}
		t1 := time.Now()
		if _, err := private.DPStep(data, nil); err != nil {
			return StepBenchResult{}, fmt.Errorf("training bench: %w", err)
		}
		tPlain += t1.Sub(t0)
		tDP += time.Since(t1)
	}
	ips := float64(batch*steps) / tPlain.Seconds()
	dps := float64(batch*steps) / tDP.Seconds()
	return StepBenchResult{Batch: batch, Steps: steps, ImagesPerS: ips, DPImagesPerS: dps, DPRatio: ips / dps, Params: n,
		Configuration: "sgd momentum 0.9; DP: sigma 1, clip 1, per-example gradients by expanded weights, dense layers by ghost norms"}, nil
}

// benchSteps runs one step of each kind (the warm-up, which compiles).
func benchSteps(plain, private *train.Trainer, data benchData) error {
	if _, err := plain.Step(data.x, data.l); err != nil {
		return fmt.Errorf("training bench: %w", err)
	}
	if _, err := private.DPStep(data, nil); err != nil {
		return fmt.Errorf("training bench: %w", err)
	}
	return nil
}

// benchData serves the benchmark's batch to DP-SGD's sampler.
type benchData struct {
	x   []float32
	l   []int32
	per int
}

func (d benchData) Len() int { return len(d.l) }

func (d benchData) Batch(idx []int, _ *rand.Rand) ([]float32, []int32, error) {
	x := make([]float32, 0, len(idx)*d.per)
	l := make([]int32, 0, len(idx))
	for _, i := range idx {
		x = append(x, d.x[i*d.per:(i+1)*d.per]...)
		l = append(l, d.l[i])
	}
	return x, l, nil
}
