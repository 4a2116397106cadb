package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/internal/engine"
)

const benchDetectLong = `Bench detect measures how often each detector finds the labelled face of LFW-style
photos (one person, face centred), on each image in colour and as a greyscale
copy (ITU-R BT.601 luma replicated into RGB, imaging.RGB.Grey).

The face counts as found when ` + eval.DetectCriterion + `.
"other_faces" counts the accepted faces that are not the labelled one: other
people in the photo and false detections alike.

Detectors: "ssd" and "tiny" alone at score 0.5 (what --detector ssd|tiny
gives), "either" (a face either of them scores at least 0.5), "both" with
face.DefaultRule on the first pass alone, and "both+retry": what detect,
embed, the pipeline and the library do by default (Detector Both): the
same rule, and when it finds no face in a photo, a second pass of both
networks on the photo with a mid-grey border (face.RetryPad of its size on
every side). With --tune the rule's thresholds are chosen on the
--train-pairs images (see "objective" in the output) and the tuned rule is
measured on every set as "both-tuned" (first pass).

Each row also counts the photos by kind ("by_kind"), measured on the colour
photo: grey-photo, dark, bright, low-contrast, blurred (in LFW's face box),
small (eye distance), tilted, turned (from the landmarks in that box), plain
(none of these); eval.PhotoKindNames and its thresholds say how.

--sides-every N adds the set "sides": the left and right quarters of
every N-th test image (or of the images given), outside LFW's face box;
every face found there counts in other_faces. The second pass runs on every
such crop in which the first finds nothing, as on a library's photos
without a face, so the set bounds the false faces it adds (some of the
faces there are people beside the subject: look at them to tell).

Images come from the arguments (set "images") or from the pairs files under
--images (sets "test" for --pairs, "train" for --train-pairs). Run it with
nice: it takes both cores for a while (LFW's development test images: about
1,550 images, two copies, two networks, and a second pass on about 5%).`

func newBenchDetectCmd(e *env) *cobra.Command {
	var o eval.DetectBenchOptions
	var models string
	var jsonOut, quiet bool
	cmd := &cobra.Command{
		Use:   "detect [IMAGE...] [--images DIR --pairs FILE [--train-pairs FILE [--tune]]]",
		Short: "Recall of the face detectors on LFW: labelled face found, colour and greyscale, per detector and combined, by kind of photo",
		Long:  benchDetectLong,
		Example: `  nice veil bench detect --images ../shared/data/lfw/images_deepfunneled \
      --train-pairs ../shared/data/lfw/pairsDevTrain.txt --pairs ../shared/data/lfw/pairsDevTest.txt --tune --json
  veil bench detect --list-missed lfw/George_W_Bush/*.jpg`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.TrainEvery < 1 || o.TestEvery < 1 || o.SidesEvery < 0 {
				return fmt.Errorf("--train-every and --test-every must be at least 1, --sides-every at least 0")
			}
			o.Images, o.Workers = args, engine.Parallelism()
			if !quiet {
				o.Progress = e.stderr
			}
			b, err := eval.NewDetectBench(o)
			if err != nil {
				return err
			}
			p, err := e.pipeline(face.Options{ModelDir: models, Detector: face.Both})
			if err != nil {
				return err
			}
			rep, err := b.Run(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(e.stdout, rep)
			}
			printDetectReport(e, rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&models, "models", "", "folder of face-api's weight files (default: $"+nets.EnvModels+", else models/ of the checkout)")
	cmd.Flags().StringVar(&o.ImagesDir, "images", "", "folder of images laid out as DIR/Name/Name_0001.jpg, for --pairs and --train-pairs")
	cmd.Flags().StringVar(&o.Pairs, "pairs", "", "pairs file (LFW's format) whose images form the test set")
	cmd.Flags().StringVar(&o.TrainPairs, "train-pairs", "", "pairs file whose images form the training set (for --tune)")
	cmd.Flags().StringVar(&o.Cache, "detections", "", "file of the networks' detections: images already in it are not run again, new ones are appended (an interrupted run resumes; re-tuning takes seconds)")
	cmd.Flags().IntVar(&o.TrainEvery, "train-every", 1, "use every n-th training image only (in name order), for a quicker run")
	cmd.Flags().IntVar(&o.TestEvery, "test-every", 1, "use every n-th test image only (in name order), for a quicker run")
	cmd.Flags().IntVar(&o.SidesEvery, "sides-every", 0, "also count the faces found in the left and right quarters (outside the labelled face) of every n-th test image, or of the images given (0: not)")
	cmd.Flags().BoolVar(&o.Tune, "tune", false, "choose the combined rule's thresholds on the training set and measure them too")
	cmd.Flags().BoolVar(&o.ListMissed, "list-missed", false, "list the images whose labelled face was not found")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print machine-readable JSON on stdout")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress output on stderr")
	return cmd
}

func printDetectReport(e *env, rep *eval.DetectReport) {
	w := e.stdout
	fmt.Fprintf(w, "labelled face found: %s\n", rep.Criterion)
	fmt.Fprintf(w, "rule \"both\": %+v; \"both+retry\": the same, and a second pass with a border of %g when it finds no face\n", rep.Rule, rep.RetryPad)
	if t := rep.Tuned; t != nil {
		fmt.Fprintf(w, "tuned on %d training images (colour and grey): %+v\n  objective: %s\n", t.Images, t.Rule, t.Objective)
	}
	fmt.Fprintf(w, "%-9s %-6s %-10s %7s %7s %8s %7s  %s\n", "set", "copy", "detector", "images", "found", "recall", "other", "found by kind")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-9s %-6s %-10s %7d %7d %7.2f%% %7d ", r.Set, r.Copy, r.Detector, r.Images, r.Found, 100*r.Recall, r.Other)
		if r.Set != eval.SideSet {
			for _, k := range r.ByKind {
				fmt.Fprintf(w, " %s %d/%d", k.Kind, k.Found, k.Images)
			}
		}
		fmt.Fprintln(w)
		for _, m := range r.Missed {
			fmt.Fprintf(w, "    missed %s\n", m)
		}
	}
	fmt.Fprintf(w, "wall time %.1f s\n", rep.WallS)
}
