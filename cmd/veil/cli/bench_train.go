package cli

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

type benchTrainResult struct {
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

func newBenchTrainCmd(e *env) *cobra.Command {
	var steps, batch int
	var width float64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Training-step throughput of LightFace, non-private and DP-SGD, at 64 and 112 pixels",
		Long: `Measures images per second of one optimiser step of LightFace (group norm,
ArcFace loss, SGD with momentum), without privacy and with DP-SGD (per-example
gradients by expanded weights, dense layers by ghost norms, clipping, noise,
accounting), and the same for the embedding head on the 2,048 age/gender
features ("head" in the JSON). The two kinds of step alternate so that both
see the same machine load; dp_ratio is non-private images/s divided by
DP-SGD images/s.`,
		Example: `  veil bench train
  veil bench train --batch 64 --steps 8 --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(atLeast("steps", steps, 1), atLeast("batch", batch, 1), flagCheck{"width", width > 0 && width <= 4, "in (0, 4]", width}); err != nil {
				return err
			}
			var res []benchTrainResult
			for _, input := range []int{64, 112} {
				r, err := benchTrainOne(input, batch, steps, width)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stderr, "input %d: %.1f images/s, DP-SGD %.1f images/s, ratio %.2f\n", input, r.ImagesPerS, r.DPImagesPerS, r.DPRatio)
				res = append(res, r)
			}
			head, err := benchTrainModel(arch.Config{Kind: "head", Features: arch.HeadAgeGender}, batch, steps)
			if err != nil {
				return err
			}
			head.Model = fmt.Sprintf("head on %s features (2048→256→128), arcface %d classes", arch.HeadAgeGender, benchClasses)
			fmt.Fprintf(e.stderr, "head: %.1f examples/s, DP-SGD %.1f examples/s, ratio %.2f\n", head.ImagesPerS, head.DPImagesPerS, head.DPRatio)
			if asJSON {
				return writeJSON(e.stdout, map[string]any{"results": res, "head": head})
			}
			for _, r := range res {
				fmt.Fprintf(e.stdout, "%3d px  non-private %7.1f images/s  DP-SGD %7.1f images/s  DP cost ×%.2f\n", r.Input, r.ImagesPerS, r.DPImagesPerS, r.DPRatio)
			}
			fmt.Fprintf(e.stdout, "head    non-private %7.1f vectors/s  DP-SGD %7.1f vectors/s  DP cost ×%.2f\n", head.ImagesPerS, head.DPImagesPerS, head.DPRatio)
			return nil
		},
	}
	cmd.Flags().IntVar(&steps, "steps", 4, "measured steps of each kind (after one warm-up step)")
	cmd.Flags().IntVar(&batch, "batch", 32, "images per step")
	cmd.Flags().Float64Var(&width, "width", 0.25, "LightFace width multiplier")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func benchTrainOne(input, batch, steps int, width float64) (benchTrainResult, error) {
	r, err := benchTrainModel(arch.Config{Kind: "lightface", Input: input, Width: width, Norm: "group"}, batch, steps)
	r.Input = input
	r.Model = fmt.Sprintf("lightface width %g group norm, arcface %d classes", width, benchClasses)
	return r, err
}

// benchClasses is the number of classes of the benchmarks' ArcFace loss.
const benchClasses = 100

// benchTrainModel times non-private and DP-SGD steps of model mc on random
// inputs, alternating the two kinds.
func benchTrainModel(mc arch.Config, batch, steps int) (benchTrainResult, error) {
	if err := checkFlags(atLeast("steps", steps, 1), atLeast("batch", batch, 1)); err != nil {
		return benchTrainResult{}, err
	}
	const classes = benchClasses
	var per int
	mk := func(dpOn bool) (*train.Trainer, int, error) {
		m, err := arch.New(mc)
		if err != nil {
			return nil, 0, err
		}
		h, err := loss.New(m.Params(), loss.Config{Kind: "arcface", Classes: classes}.Defaults(), 128)
		if err != nil {
			return nil, 0, err
		}
		m.Params().Init(1)
		per = 1
		for _, d := range m.InputDims() {
			per *= d
		}
		o := train.Options{Optimizer: "sgd", LearningRate: 0.01, Momentum: 0.9, WeightDecay: 5e-4, MicroBatch: batch}
		if dpOn {
			src, err := dp.NewSource()
			if err != nil {
				return nil, 0, err
			}
			// q = 1 on the batch's examples: every DP step samples all of
			// them, one full micro-batch like the non-private step.
			o.DP = &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: 1, Clip: 1, SamplingRate: 1, Delta: 1e-5, DatasetSize: batch, Source: src}
		}
		t, err := train.New(m, h, o)
		return t, m.Params().NumTrainable(), err
	}
	plain, n, err := mk(false)
	if err != nil {
		return benchTrainResult{}, err
	}
	private, _, err := mk(true)
	if err != nil {
		return benchTrainResult{}, err
	}
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, batch*per)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.5)
	}
	l := make([]int32, batch)
	for i := range l {
		l[i] = int32(r.IntN(classes))
	}
	data := benchData{x: x, l: l, per: per}
	// Warm up (compiles), then alternate.
	if _, err := plain.Step(x, l); err != nil {
		return benchTrainResult{}, err
	}
	if _, err := private.DPStep(data, nil); err != nil {
		return benchTrainResult{}, err
	}
	var tPlain, tDP time.Duration
	for s := 0; s < steps; s++ {
		t0 := time.Now()
		if _, err := plain.Step(x, l); err != nil {
			return benchTrainResult{}, err
		}
		t1 := time.Now()
		if _, err := private.DPStep(data, nil); err != nil {
			return benchTrainResult{}, err
		}
		tPlain += t1.Sub(t0)
		tDP += time.Since(t1)
	}
	ips := float64(batch*steps) / tPlain.Seconds()
	dps := float64(batch*steps) / tDP.Seconds()
	return benchTrainResult{Batch: batch, Steps: steps, ImagesPerS: ips, DPImagesPerS: dps, DPRatio: ips / dps, Params: n,
		Configuration: "sgd momentum 0.9; DP: sigma 1, clip 1, per-example gradients by expanded weights, dense layers by ghost norms"}, nil
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
