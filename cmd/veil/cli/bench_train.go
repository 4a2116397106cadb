package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/training"
)

const benchTrainLong = `Measures images per second of one optimiser step of LightFace (group norm,
ArcFace loss, SGD with momentum), without privacy and with DP-SGD (per-example
gradients by expanded weights, dense layers by ghost norms, clipping, noise,
accounting), and the same for the embedding head on the 2,048 age/gender
features ("head" in the JSON). The two kinds of step alternate so that both
see the same machine load; dp_ratio is non-private images/s divided by
DP-SGD images/s.`

func newBenchTrainCmd(e *env) *cobra.Command {
	var o training.StepBenchOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Training-step throughput of LightFace, non-private and DP-SGD, at 64 and 112 pixels",
		Long:  benchTrainLong,
		Example: `  veil bench train
  veil bench train --batch 64 --steps 8 --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(atLeast("steps", o.Steps, 1), atLeast("batch", o.Batch, 1), flagCheck{"width", o.Width > 0 && o.Width <= 4, "in (0, 4]", o.Width}); err != nil {
				return err
			}
			eng, err := e.engine()
			if err != nil {
				return err
			}
			o.Engine, o.Progress = eng, e.stderr
			b, err := training.NewStepBench(o)
			if err != nil {
				return err
			}
			rep, err := b.Run()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			for _, r := range rep.Results {
				fmt.Fprintf(e.stdout, "%3d px  non-private %7.1f images/s  DP-SGD %7.1f images/s  DP cost ×%.2f\n", r.Input, r.ImagesPerS, r.DPImagesPerS, r.DPRatio)
			}
			head := rep.Head
			fmt.Fprintf(e.stdout, "head    non-private %7.1f vectors/s  DP-SGD %7.1f vectors/s  DP cost ×%.2f\n", head.ImagesPerS, head.DPImagesPerS, head.DPRatio)
			return nil
		},
	}
	cmd.Flags().IntVar(&o.Steps, "steps", 4, "measured steps of each kind (after one warm-up step)")
	cmd.Flags().IntVar(&o.Batch, "batch", 32, "images per step")
	cmd.Flags().Float64Var(&o.Width, "width", 0.25, "LightFace width multiplier")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
