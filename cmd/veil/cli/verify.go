package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/desccache"
	"github.com/veil-privacy/veil/face/describer"
	"github.com/veil-privacy/veil/internal/atomicfile"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/internal/progress"
)

// fallbackDescription says what verify does with images without a face.
const fallbackDescription = "central face: of the faces scoring at least --min-score the one nearest the image centre is used; if none, the central detection scoring at least 0.1 (counted in low_score_faces); if none either, a central box of LFW's median face size (counted in no_face), in which landmarks and the descriptor are computed; in the last two cases the other detector's central face (found the same way) replaces it when its landmarks fit dlib's mean face better (counted in second_detector_faces)"

// verifyHelp is veil verify's --help.
var verifyHelp = `Verify runs the Labeled Faces in the Wild protocol on a folder laid out as
DIR/Name/Name_0001.jpg and a pairs file in LFW's format. Given two photos
instead (veil verify a.jpg b.jpg), it does what veil compare does, with
compare's defaults (--detector both): says whether they show the same person
(see veil compare --help).

A pairs file whose header gives folds ("10 300", like LFW's pairs.txt) is scored
by k-fold cross-validation: each fold with the distance threshold that is best on
the other folds; the mean accuracy and its standard deviation are reported. A
single-set file (header "500", like pairsDevTest.txt) is scored with the
threshold that is best on --train-pairs (e.g. pairsDevTrain.txt). The accuracy
is also split by kind of pair: the share of same-person pairs called same and
of different-person pairs called different.

ROC AUC, equal error rate and the true-accept rate at false-accept rates 0.1,
0.01 and 0.001 are always reported, with how many images had no detected face.
Of several faces, the one nearest the image centre is used. When no face reaches
--min-score, the central detection scoring at least 0.1 is used; when there is
none, a central box of LFW's median face size is assumed (see "fallback").

When the detector's central face scores below --min-score or there is none, the
other detector is consulted too, and the face whose 68 landmarks fit dlib's mean
face better is kept (counted in second_detector_faces): a doubtful box often
gives landmarks that collapse.

The defaults for pairs files (--detector tiny --align both, with SSD consulted
for doubtful faces: the central faces --detector both takes) measured best on
LFW's development pairs; --detector ssd finds more faces in general photos.

With --head CKPT the pairs are scored by a head trained with veil train
(--model head) on the inputs veil train gives it: the central face's
descriptor, or for a head on age/gender features (--features agegender) the
age/gender network's region features of LFW's fixed face box (deep-funnelled
250×250 images only). Pairs are scored by cosine similarity as veil train
scores them, so the accuracy on pairsDevTest.txt with --train-pairs
pairsDevTrain.txt is the dev_accuracy of the training report; the threshold is
reported as a cosine distance (1 − similarity).

Descriptors are cached on disk, keyed by image content and pipeline settings
(--cache, else $` + desccache.EnvCache + `, else the user's cache folder), so a
second run is fast; entries are written atomically, so an interrupted run
leaves a usable cache.`

func newVerifyCmd(e *env) *cobra.Command {
	c := &compareFlags{}
	var imagesDir, pairsPath, trainPath, report string
	cmd := &cobra.Command{
		Use:   "verify --images DIR --pairs FILE [--train-pairs FILE] | verify PHOTO_A PHOTO_B",
		Short: "Score face verification on LFW-style pairs (accuracy, ROC AUC, EER, TAR@FAR), or compare two photos",
		Long:  verifyHelp,
		Example: `  veil verify --images ../shared/data/lfw/images_deepfunneled \
      --pairs ../shared/data/lfw/pairsDevTest.txt --train-pairs ../shared/data/lfw/pairsDevTrain.txt
  veil verify --images lfw --pairs pairs.txt --json
  veil verify --head out/head-dp.ckpt --images lfw/images_deepfunneled --pairs lfw/pairsDevTest.txt --train-pairs lfw/pairsDevTrain.txt
  veil verify a.jpg b.jpg`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return fmt.Errorf("verify takes two photos to compare (as veil compare does) or none with --images and --pairs; got %d argument(s)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVerify(e, cmd, c, args, imagesDir, pairsPath, trainPath, report)
		},
	}
	// Verification sets are centred face crops: the tiny detector measured
	// better there (LFW dev pairs: 98.6% vs SSD's 98.3%, --align faceapi,
	// one detector) and 2.5x faster.
	c.pf.register(cmd, true, "tiny")
	cmd.Flags().StringVar(&imagesDir, "images", "", "folder of images laid out as DIR/Name/Name_0001.jpg (required with --pairs)")
	cmd.Flags().StringVar(&pairsPath, "pairs", "", "pairs file to score, in LFW's format")
	cmd.Flags().StringVar(&trainPath, "train-pairs", "", "pairs file that chooses the threshold for a single-set --pairs file")
	cmd.Flags().StringVar(&report, "report", "", "also write the JSON report to this file (the results still go to the terminal)")
	c.registerCache(cmd)
	cmd.Flags().StringVar(&c.head, "head", "", headFlagUsage)
	c.registerCompare(cmd)
	return cmd
}

// runVerifyPairs scores a pairs file (the LFW protocol).
// runVerify compares two photos (args) as veil compare does, or scores a
// pairs file.
func runVerify(e *env, cmd *cobra.Command, c *compareFlags, args []string, imagesDir, pairsPath, trainPath, report string) error {
	if len(args) == 2 {
		for _, n := range []string{"images", "pairs", "train-pairs"} {
			if cmd.Flags().Changed(n) {
				return fmt.Errorf("--%s scores a pairs file; with two photos verify compares them (give one or the other)", n)
			}
		}
		// Two photos: veil compare, with its default detector
		// (the pairs protocol keeps tiny, whose central faces are
		// the ones --detector both takes, and its cache).
		if !cmd.Flags().Changed("detector") {
			c.pf.detector = string(face.Both)
		}
		return runCompare(e, c, args[0], args[1])
	}
	for _, n := range []string{"face-a", "face-b", "threshold", "lfw"} {
		if cmd.Flags().Changed(n) {
			return fmt.Errorf("--%s applies to two photos (veil verify PHOTO_A PHOTO_B), not to --pairs", n)
		}
	}
	if imagesDir == "" || pairsPath == "" {
		return fmt.Errorf("give two photos to compare, or --images and --pairs to score a pairs file (see veil verify --help)")
	}
	return runVerifyPairs(e, c, imagesDir, pairsPath, trainPath, report)
}

// verifyReport is veil verify's report on a pairs file.
type verifyReport struct {
	*eval.VerifyResult
	Detector string    `json:"detector,omitempty"`
	Align    string    `json:"align,omitempty"`
	Head     *headInfo `json:"head,omitempty"`
	WallS    float64   `json:"wall_s"`
}

func runVerifyPairs(e *env, c *compareFlags, imagesDir, pairsPath, trainPath, report string) error {
	pf := &c.pf
	if st, err := os.Stat(imagesDir); err != nil || !st.IsDir() {
		return fmt.Errorf("--images %s is not a folder", imagesDir)
	}
	test, train, err := readVerifyPairs(pairsPath, trainPath)
	if err != nil {
		return err
	}
	opt, err := pf.options()
	if err != nil {
		return err
	}
	opt.Descriptors = true
	opt.SecondDetector = true
	start := time.Now()
	vo := eval.VerifyOptions{ImagesDir: imagesDir, Test: test, Train: train, Workers: engine.Parallelism()}
	var res *eval.VerifyResult
	var head *headRunner
	if c.head != "" {
		if head, err = openHead(e, c.head, pf.models); err == nil {
			res, err = verifyHead(e, head, c.headInputFlags(), vo)
		}
	} else {
		res, opt, err = verifyPipeline(e, c, opt, vo)
	}
	if err != nil {
		return err
	}
	res.Fallback = fallbackDescription
	out := verifyReport{VerifyResult: res, Detector: string(opt.Detector), Align: string(opt.Align), WallS: time.Since(start).Seconds()}
	// A head on age/gender features reads LFW's fixed face box: no
	// detector, aligner or fallback is involved.
	regions := head != nil && !head.needsDescriptors()
	if head != nil {
		info := head.info()
		out.Head = &info
	}
	if regions {
		out.Detector, out.Align, res.Fallback = "", "", ""
	}
	if report != "" {
		if err := atomicfile.Write(report, 0o600, func(w io.Writer) error { return writeJSON(w, out) }); err != nil {
			return fmt.Errorf("verify: writing the report %s: %w", report, err)
		}
	}
	if pf.json {
		return writeJSON(e.stdout, out)
	}
	printVerify(e.stdout, out, opt, regions)
	return nil
}

// readVerifyPairs reads the pairs file to score and the one that chooses
// the threshold, which a single-set file needs.
func readVerifyPairs(pairsPath, trainPath string) (test, train *dataset.PairsFile, err error) {
	if test, err = dataset.ReadPairsFile(pairsPath); err != nil {
		return nil, nil, err
	}
	if trainPath != "" {
		if train, err = dataset.ReadPairsFile(trainPath); err != nil {
			return nil, nil, err
		}
	} else if test.Folds == 1 {
		return nil, nil, fmt.Errorf("%s is a single set (no folds): give --train-pairs to choose the threshold", pairsPath)
	}
	return test, train, nil
}

// verifyPipeline scores the pairs of vo by the face pipeline's
// descriptors, through the descriptor cache, and returns the pipeline's
// options as it ran.
func verifyPipeline(e *env, c *compareFlags, opt face.Options, vo eval.VerifyOptions) (*eval.VerifyResult, face.Options, error) {
	p, err := e.pipeline(opt)
	if err != nil {
		return nil, opt, err
	}
	opt = p.Options()
	cache, err := describer.Options{CacheDir: c.cacheDir, NoCache: c.noCache}.OpenCache(describer.CacheSettings(opt))
	if err != nil {
		return nil, opt, err
	}
	bar := progress.New(e.stderr, "describing", countImages(vo.Test, vo.Train), c.pf.quiet)
	vo.Progress = func() { bar.Add(1) }
	res, err := eval.Verify(vo, describer.Pipeline(p, cache))
	bar.Done()
	return res, opt, err
}

// printVerify prints veil verify's readable report.
func printVerify(w io.Writer, out verifyReport, opt face.Options, regions bool) {
	res := out.VerifyResult
	if out.Head != nil {
		fmt.Fprintln(w, out.Head.describe())
	}
	if regions {
		fmt.Fprintf(w, "pairs %d (%d fold(s)), images %d, age/gender region features of LFW's fixed face box\n", res.Pairs, res.Folds, res.Images)
	} else {
		fmt.Fprintf(w, "pairs %d (%d fold(s)), images %d, detector %s, aligner %s\n", res.Pairs, res.Folds, res.Images, opt.Detector, opt.Align)
	}
	if res.Folds > 1 {
		fmt.Fprintf(w, "accuracy %.2f%% ± %.2f%% (k-fold), mean threshold %.4f (%s distance)\n", 100*res.Accuracy, 100*res.AccuracyStd, res.Threshold, res.Metric)
	} else {
		fmt.Fprintf(w, "accuracy %.2f%% at threshold %.4f (%s distance; chosen on %d training pairs, %.2f%% there)\n", 100*res.Accuracy, res.Threshold, res.Metric, res.TrainPairs, 100*res.TrainAcc)
	}
	fmt.Fprintf(w, "same-person pairs called same %.2f%%, different-person pairs called different %.2f%%\n", 100*res.SameRight, 100*res.DifferentRight)
	fmt.Fprintf(w, "ROC AUC %.4f, EER %.2f%%, TAR@FAR 0.1 %.2f%%, 0.01 %.2f%%, 0.001 %.2f%%\n", res.AUC, 100*res.EER,
		100*res.TARAtFAR["0.1"], 100*res.TARAtFAR["0.01"], 100*res.TARAtFAR["0.001"])
	if !regions {
		fmt.Fprintf(w, "images whose face scored below %.2g (central detection ≥ 0.1 used): %d; with no detection at all (central box used): %d; face taken from the second detector: %d\n", opt.MinScore, res.LowScore, res.NoFace, res.SecondDetector)
	}
	fmt.Fprintf(w, "wall time %.1f s\n", out.WallS)
}

func countImages(pfs ...*dataset.PairsFile) int {
	seen := map[string]bool{}
	for _, pf := range pfs {
		if pf == nil {
			continue
		}
		for _, p := range pf.Pairs {
			seen[p.ImagePath("", false)] = true
			seen[p.ImagePath("", true)] = true
		}
	}
	return len(seen)
}
