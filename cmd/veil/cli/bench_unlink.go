package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/eval"
)

const benchUnlinkLong = `Unlink simulates two face libraries with overlapping people drawn from LFW's
development identities (peopleDevTrain.txt and peopleDevTest.txt, people with
at least 4 photos; a shared person's photos are split between the libraries).
Every face is named by its library. Each library stores its faceprints (the
pipeline's descriptors as a library keeps them; --normalize scales them to unit
length first, as Irene does) under its own map: plain descriptors (identity), its secret random rotation
(rotation), or LMNN learned from its names starting from that rotation
(lmnn, what a Veil library does). Each library calibrates its own tagging
threshold on its own faces (balanced accuracy over all pairs).

Direct comparison (Irene's experiment): library B's faces of the evaluated
shared people are tagged with the person of their nearest face in library A
when within A's threshold. "linked" is the share tagged right; mis_tag = 1 −
linked is the figure Irene reports as 93.4%.

The aligning adversary knows m people both libraries have, fits a map from
B's space to A's on their faceprint centroids (orthogonal Procrustes with a
scale, or least squares with a small ridge), and tags B's faces through it.
Every point of the curve is scored on the same evaluated people, never known
to the adversary.

Descriptors come from the face pipeline with the descriptor cache that veil
verify and veil train use (same settings), so cached images are not
recomputed.`

func newBenchUnlinkCmd(e *env) *cobra.Command {
	var f lfwFlags
	var o eval.LinkageOptions
	var metrics []string
	var asJSON bool
	var workers int
	cmd := &cobra.Command{
		Use:   "unlink",
		Short: "Measure how well two colluding users can link their libraries' faceprints (Irene IV.E), directly and after aligning the spaces on m known people",
		Long:  benchUnlinkLong,
		Example: `  veil bench unlink --json
  veil bench unlink --trials 3 --known 5,20,50,128`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every flag is checked before the minutes of describing LFW.
			checks := []flagCheck{atLeast("workers", workers, 0)}
			for _, m := range metrics {
				checks = append(checks, oneOf("metrics", m, string(eval.LinkIdentity), string(eval.LinkRotation), string(eval.LinkLMNN)))
				o.Metrics = append(o.Metrics, eval.LinkMetric(m))
			}
			if err := checkFlags(checks...); err != nil {
				return err
			}
			o.LMNN.Workers = workers
			src, err := f.source(e)
			if err != nil {
				return err
			}
			if !f.head.quiet {
				o.Progress = func(s string) { fmt.Fprintln(e.stderr, s) }
			}
			rep, err := eval.MeasureLinkageLFW(cmd.Context(), src, o)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			printLinkage(e, rep.LinkageReport)
			fmt.Fprintf(e.stdout, "wall time %.1f s\n", rep.WallS)
			return nil
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.IntVar(&o.Shared, "shared", 0, "people in both libraries (default: half of the pool)")
	fl.IntVar(&o.Evaluated, "evaluated", 0, "shared people scored and never known to the adversary (default: shared minus the largest --known)")
	fl.IntSliceVar(&o.Known, "known", nil, "numbers m of shared people the aligning adversary knows (default 1,2,5,10,20,50,100,128,200, those that fit)")
	fl.IntVar(&o.MaxImages, "max-images", 0, "photos per person at most (default 16)")
	fl.IntVar(&o.Trials, "trials", 1, "repetitions with other people, photos and keys (counts pooled)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the draw of people and photos and of the simulated libraries' keys")
	fl.StringSliceVar(&metrics, "metrics", nil, "library maps to measure: identity, rotation, lmnn (default all)")
	fl.BoolVar(&o.Normalize, "normalize", false, "scale descriptors to unit length first, as Irene does (default: as a library stores them)")
	fl.IntVar(&workers, "workers", 0, "LMNN worker goroutines (default GOMAXPROCS)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printLinkage(e *env, rep *eval.LinkageReport) {
	w := e.stdout
	fmt.Fprintf(w, "pool %d people; %d shared (%d evaluated), %d only in A, %d only in B; A %d faces, B %d faces; %d trial(s)\n",
		rep.PoolPeople, rep.Shared, rep.Evaluated, rep.OnlyA, rep.OnlyB, rep.FacesA, rep.FacesB, rep.Trials)
	for _, m := range rep.Metrics {
		fmt.Fprintf(w, "\n%s: thresholds A %.3f, B %.3f\n", m.Metric, m.ThresholdA, m.ThresholdB)
		fmt.Fprintf(w, "  A tagging its own faces:  linked %5.1f%%\n", 100*m.Within.Linked)
		fmt.Fprintf(w, "  direct comparison:        linked %5.1f%%  mis-tag %5.1f%% (wrong %4.1f%%, none %5.1f%%)  forced choice %5.1f%% (chance %.1f%%)\n",
			100*m.Direct.Linked, 100*m.Direct.MisTag, 100*m.Direct.WrongTag, 100*m.Direct.NoTag, 100*m.Direct.NearestCorrect, 100*m.ChanceNearest)
		for _, p := range m.Aligned {
			fmt.Fprintf(w, "  %-13s m = %3d:     linked %5.1f%%  mis-tag %5.1f%% (wrong %4.1f%%, none %5.1f%%)  forced choice %5.1f%%\n",
				p.Method, p.Known, 100*p.Linked, 100*p.MisTag, 100*p.WrongTag, 100*p.NoTag, 100*p.NearestCorrect)
		}
	}
}
