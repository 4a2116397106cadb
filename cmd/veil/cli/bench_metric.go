package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/eval"
)

const benchMetricLong = `Metric plays a user on a library of LFW's development identities with at least
5 photos, plus every person with a single photo as strangers (never named):
the user names k random photos per person (--named, default 1 and 3), reviews
a share (--review-share) of the suggestions made with plain descriptors at
--review-threshold (right ones are confirmed and become names, wrong ones are
rejected), the library learns LMNN from those names and rejections starting
from its secret rotation, and the remaining faces are suggested by their
nearest named face under plain descriptors and under the learned metric.

The metrics' distance scales differ, so they are compared where each lets
the same share of the strangers' faces receive a suggestion (--stranger-rates):
precision, coverage and recall of the named people's other faces there, and
the forced-choice rate (nearest named face is the right person). The
training split (peopleDevTrain.txt) decides; the test split
(peopleDevTest.txt) confirms.

Descriptors come from the face pipeline through the descriptor cache that
veil verify and veil train use.`

func newBenchMetricCmd(e *env) *cobra.Command {
	var f lfwFlags
	var o eval.MetricBenchOptions
	var asJSON bool
	var workers int
	var splits []string
	cmd := &cobra.Command{
		Use:   "metric",
		Short: "Measure whether a library's learned metric (LMNN) suggests names better than plain descriptors, on LFW's development identities",
		Long:  benchMetricLong,
		Example: `  veil bench metric --json
  veil bench metric --splits train --named 3`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every flag is checked before the first split's minutes of
			// work, so a mistyped second split is not reported last.
			checks := []flagCheck{atLeast("workers", workers, 0)}
			for _, split := range splits {
				checks = append(checks, oneOf("splits", split, "train", "test"))
			}
			if err := checkFlags(checks...); err != nil {
				return err
			}
			o.Gain.LMNN.Workers, o.Splits = workers, splits
			src, err := f.source(e)
			if err != nil {
				return err
			}
			if !f.head.quiet {
				o.Progress = e.stderr
			}
			res, err := eval.MeasureMetricGainLFW(cmd.Context(), src, o)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, res)
			}
			printBenchMetric(e, res)
			return nil
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.IntSliceVar(&o.Gain.Named, "named", []int{1, 3}, "photos the user names per person")
	fl.Float64Var(&o.Gain.ReviewShare, "review-share", 0.25, "share of the plain suggestions the user reviews before learning")
	fl.Float64Var(&o.Gain.ReviewThreshold, "review-threshold", 0.45, "plain-descriptor suggestion distance of the review (tagging's SuggestDistance)")
	fl.Float64SliceVar(&o.Gain.StrangerRates, "stranger-rates", []float64{0.01, 0.05}, "strangers' false-suggestion rates at which the metrics are compared")
	fl.Uint64Var(&o.Gain.Seed, "seed", 1, "seed of the named photos, the review and the library's key")
	fl.StringSliceVar(&splits, "splits", []string{"train", "test"}, "LFW development splits to measure: train, test")
	fl.IntVar(&workers, "workers", 0, "LMNN worker goroutines (default GOMAXPROCS)")
	fl.IntVar(&o.Gain.LMNN.K, "k", 0, "LMNN target neighbours per named face (default 3)")
	fl.IntVar(&o.Gain.LMNN.Iterations, "iterations", 0, "LMNN gradient steps at most (default 200)")
	fl.Float64Var(&o.Gain.LMNN.Regularization, "regularization", 0, "LMNN trace regularisation λ (default 0)")
	fl.IntVar(&o.Gain.LMNN.OutputDim, "output-dim", 0, "rows of V (default: the descriptor's 128)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printBenchMetric(e *env, res *eval.MetricBenchReport) {
	w := e.stdout
	for _, s := range res.Splits {
		r := s.Report
		fmt.Fprintf(w, "%s split: %d people (≥5 photos), %d strangers, %d faces\n", s.Split, r.People, r.Strangers, r.Faces)
		for _, g := range r.Results {
			fmt.Fprintf(w, "  %d named per person: %d names, %d confirmed and %d rejected in review; %d faces and %d strangers scored\n",
				g.NamedPerPerson, g.Named, g.Confirmed, g.Rejected, g.Queries, g.StrangerFaces)
			fmt.Fprintf(w, "    forced choice: plain %.1f%%, learned %.1f%% (LMNN %.1f s)\n", 100*g.NearestCorrectPlain, 100*g.NearestCorrectLearned, g.LearnSeconds)
			p := g.PlainAtReviewThreshold
			fmt.Fprintf(w, "    plain at %.2f: precision %.1f%%, coverage %.1f%%, strangers %.1f%%\n", p.Threshold, 100*p.Precision, 100*p.Coverage, 100*p.Strangers)
			if g.Learned {
				p := g.LearnedAtCarriedThreshold
				fmt.Fprintf(w, "    learned at %.3f (carried over): precision %.1f%%, coverage %.1f%%, strangers %.1f%%\n", p.Threshold, 100*p.Precision, 100*p.Coverage, 100*p.Strangers)
			}
			for _, a := range g.At {
				fmt.Fprintf(w, "    strangers %4.1f%%: plain precision %.1f%% coverage %.1f%% recall %.1f%% | learned precision %.1f%% coverage %.1f%% recall %.1f%%\n",
					100*a.StrangerRate, 100*a.Plain.Precision, 100*a.Plain.Coverage, 100*a.Plain.Recall,
					100*a.Learned.Precision, 100*a.Learned.Coverage, 100*a.Learned.Recall)
			}
		}
	}
	fmt.Fprintf(w, "wall time %.1f s\n", res.WallS)
}
