package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/desccache"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// compareFlags are the flags of `veil compare` (and of `veil verify` given
// two photos).
type compareFlags struct {
	pf           pipelineFlags
	faceA, faceB int
	threshold    float64
	head         string
	lfw          string
	cacheDir     string
	noCache      bool
}

// registerCompare adds the flags that choose faces and the threshold.
func (c *compareFlags) registerCompare(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&c.faceA, "face-a", 0, "compare this face of the first photo: its number in the listing, from 1, as veil detect numbers and draws it (0: the largest face)")
	fl.IntVar(&c.faceB, "face-b", 0, "compare this face of the second photo: its number in the listing, from 1, as veil detect numbers and draws it (0: the largest face)")
	fl.Float64Var(&c.threshold, "threshold", 0, "call the faces the same person at or below this distance (default: the threshold measured on LFW's development training pairs)")
	fl.StringVar(&c.lfw, "lfw", "", "with --head and no --threshold: LFW folder whose development pairs choose the head's threshold (default: <data>/lfw)")
}

// registerCache adds the descriptor cache flags.
func (c *compareFlags) registerCache(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.cacheDir, "cache", "", "descriptor cache folder (default $"+desccache.EnvCache+", else the user's cache folder)")
	cmd.Flags().BoolVar(&c.noCache, "no-cache", false, "do not read or write the descriptor cache")
}

// compareLong is the help shared by compare and verify's two-photo form.
const compareLong = `Compare says whether two photos show the same person: it finds the faces in
each photo, describes one face of each with the face pipeline (dlib's 128-d
descriptor; the defaults are veil verify's), and calls them the same person when
the Euclidean distance of the two descriptors is at most the threshold.

The threshold is not a guess: it is the one veil verify chooses on LFW's 2,200
development training pairs with the default settings, and the output says what
it means on LFW's 1,000 development test pairs (how many same-person pairs it
calls the same and how many different-person pairs it calls different).
--threshold replaces it. Changing --detector or --align moves distances a little;
the threshold was measured with the defaults.

Which faces: every face found is listed with its number (from 1) and box; of
several, the largest is compared (in a portrait, selfie or group photo the
person the photo is about is usually the nearest, wherever the framing puts
them), and --face-a N / --face-b N pick another. The faces and their numbers
are those veil detect lists and draws (--draw) with the same --detector, whose
default, both, is detect's and search's: either network alone at --min-score,
or both at lower scores, which finds most faces of greyscale photos. The output
names the compared faces and their boxes. With --detector ssd or tiny, when that
detector finds no face in a photo both are tried together and the output says
so; a photo where none is found is an error naming the photo.

With --head CKPT the faces are compared by a head trained with veil train
(--model head): cosine distance of its embeddings, with the threshold the head
scores best on LFW's development training pairs (computed from the descriptor
cache, so fast after veil train or veil verify --head filled it) unless
--threshold is given.

Exit status: 0 when the two faces were compared, whatever the verdict (read
"same" in the output); 1 on bad input; 3 when a photo has no face.`

const compareExample = `  veil compare a.jpg b.jpg
  veil compare --json a.jpg group.jpg --face-b 2
  veil compare --head out/head-dp.ckpt a.jpg b.jpg`

func newCompareCmd(e *env) *cobra.Command {
	c := &compareFlags{}
	cmd := &cobra.Command{
		Use:     "compare PHOTO_A PHOTO_B",
		Short:   "Say whether two photos show the same person (distance, threshold and what it means)",
		Long:    compareLong,
		Example: compareExample,
		Args:    twoPhotos("compare"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCompare(e, c, args[0], args[1])
		},
	}
	c.pf.register(cmd, true, string(face.Both))
	c.registerCompare(cmd)
	c.registerCache(cmd)
	cmd.Flags().StringVar(&c.head, "head", "", headFlagUsage)
	return cmd
}

// twoPhotos accepts exactly two arguments, with a message that says so.
func twoPhotos(command string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 2 {
			return fmt.Errorf("%s takes two photos, got %d argument(s) (see veil %s --help)", command, len(args), command)
		}
		return nil
	}
}

// comparedPhoto is one photo's part of the comparison.
type comparedPhoto struct {
	Path   string      `json:"path"`
	Width  int         `json:"width"`
	Height int         `json:"height"`
	Faces  []faceBrief `json:"faces"`
	// Compared is the number (from 1) of the compared face in Faces, and
	// Box its box.
	Compared int      `json:"compared"`
	Box      face.Box `json:"box"`
	// Chosen says how: "largest" or "--face-a"/"--face-b".
	Chosen string `json:"chosen_by"`
	// Detector is the detector that found Faces: --detector, or the
	// other one when --detector found none.
	Detector string `json:"detector"`
	vector   []float32
}

type faceBrief struct {
	// Number is the face's number, from 1, as veil detect numbers it.
	Number int      `json:"number"`
	Box    face.Box `json:"box"`
	Score  float64  `json:"score"`
}

// compareReport is compare's --json output.
type compareReport struct {
	eval.Comparison
	// Vectors says what was compared: descriptor or head embedding.
	Vectors string    `json:"vectors"`
	Head    *headInfo `json:"head,omitempty"`
	// ThresholdSource says where the threshold comes from, and Meaning
	// what it does on LFW's development test pairs (empty for --threshold).
	ThresholdSource string `json:"threshold_source"`
	// SameRight and DifferentRight are the fractions of LFW's development
	// test pairs of the same person called same and of different people
	// called different at the threshold (absent for --threshold).
	SameRight      *float64      `json:"same_pairs_right,omitempty"`
	DifferentRight *float64      `json:"different_pairs_right,omitempty"`
	Meaning        string        `json:"meaning,omitempty"`
	A              comparedPhoto `json:"a"`
	B              comparedPhoto `json:"b"`
}

// runCompare compares the chosen faces of two photos and reports.
func runCompare(e *env, c *compareFlags, pathA, pathB string) error {
	imgs, err := c.checkAndRead(pathA, pathB)
	if err != nil {
		return err
	}
	var r *headRunner
	if c.head != "" {
		if r, err = openHead(e, c.head, c.pf.models); err != nil {
			return err
		}
	}
	rep, opt, err := c.comparePhotos(e, r, [2]string{pathA, pathB}, imgs)
	if err != nil {
		return err
	}
	metric := eval.Euclidean
	if r != nil {
		info := r.info()
		rep.Head, rep.Vectors, metric = &info, "head embedding", eval.CosineDistance
	}
	thr, err := c.compareThreshold(e, r, opt, rep)
	if err != nil {
		return err
	}
	if rep.Comparison, err = eval.Compare(rep.A.vector, rep.B.vector, metric, thr); err != nil {
		return err
	}
	if rep.SameRight != nil {
		rep.Meaning = fmt.Sprintf("at this threshold, on LFW's development test pairs, %.1f%% of same-person pairs are called the same person and %.1f%% of different-person pairs are called different",
			100**rep.SameRight, 100**rep.DifferentRight)
	}
	if c.pf.json {
		return writeJSON(e.stdout, rep)
	}
	printCompare(e.stdout, rep)
	return nil
}

// checkAndRead checks the comparison's flags and reads both photos before
// any network loads: a wrong path fails fast.
func (c *compareFlags) checkAndRead(pathA, pathB string) ([2]*imaging.RGB, error) {
	var imgs [2]*imaging.RGB
	for _, f := range []struct {
		name string
		v    int
	}{{"--face-a", c.faceA}, {"--face-b", c.faceB}} {
		if f.v < 0 {
			return imgs, fmt.Errorf("%s must be a face number (1, 2, …; 0 for the largest face), got %d", f.name, f.v)
		}
	}
	given := c.pf.cmd != nil && c.pf.cmd.Flags().Changed("threshold")
	if c.threshold < 0 || given && c.threshold == 0 || math.IsNaN(c.threshold) || math.IsInf(c.threshold, 0) {
		return imgs, fmt.Errorf("--threshold must be a positive distance, got %g", c.threshold)
	}
	for i, path := range []string{pathA, pathB} {
		img, _, err := imaging.DecodeFile(path, imaging.DefaultLimits())
		if err != nil {
			return imgs, err // names the photo already
		}
		imgs[i] = img
	}
	return imgs, nil
}

// comparePhotos describes the chosen face of each photo (by the pipeline,
// with the fallback detector, and the head r if any) and returns the
// report so far with the pipeline's options.
func (c *compareFlags) comparePhotos(e *env, r *headRunner, paths [2]string, imgs [2]*imaging.RGB) (*compareReport, face.Options, error) {
	opt, err := c.pf.options()
	if err != nil {
		return nil, opt, err
	}
	opt.Descriptors = r == nil || r.needsDescriptors()
	p, err := e.pipeline(opt)
	if err != nil {
		return nil, opt, err
	}
	opt = p.Options()
	pp, err := face.NewFallback(p)
	if err != nil {
		return nil, opt, err
	}
	a, err := comparePhoto(pp, r, paths[0], imgs[0], c.faceA, "--face-a")
	if err != nil {
		return nil, opt, err
	}
	b, err := comparePhoto(pp, r, paths[1], imgs[1], c.faceB, "--face-b")
	if err != nil {
		return nil, opt, err
	}
	return &compareReport{Vectors: "descriptor", A: *a, B: *b}, opt, nil
}

// compareThreshold is the distance threshold of the comparison and says
// where it comes from in rep: --threshold; without a head, the one
// measured for descriptors on LFW's development pairs; with one, the best
// for the head on them.
func (c *compareFlags) compareThreshold(e *env, r *headRunner, opt face.Options, rep *compareReport) (float64, error) {
	thr := c.threshold
	switch {
	case c.threshold > 0:
		rep.ThresholdSource = "--threshold"
	case r == nil:
		thr = eval.DescriptorThreshold
		same, diff := eval.DescriptorSameRate, eval.DescriptorDifferentRate
		rep.SameRight, rep.DifferentRight = &same, &diff
		rep.ThresholdSource = "best on LFW's development training pairs (pairsDevTrain.txt) with veil verify's pipeline (each photo's central face: the tiny detector's, checked against SSD's when doubtful, as --detector both takes it; --align both)"
		if opt.Detector == face.SSD || opt.Align != face.AlignBoth {
			fmt.Fprintf(e.stderr, "note: the threshold was measured with veil verify's faces (tiny detector, SSD for doubtful faces) and --align both, not --detector %s --align %s\n", opt.Detector, opt.Align)
		}
	default:
		res, err := c.headThreshold(e, r)
		if err != nil {
			return 0, err
		}
		thr = res.Threshold
		rep.SameRight, rep.DifferentRight = &res.SameRight, &res.DifferentRight
		rep.ThresholdSource = fmt.Sprintf("best for this head on LFW's development training pairs (%d pairs)", res.TrainPairs)
	}
	return thr, nil
}

// printCompare prints veil compare's readable report.
func printCompare(w io.Writer, rep *compareReport) {
	if rep.Head != nil {
		fmt.Fprintln(w, rep.Head.describe())
	}
	for _, ph := range []*comparedPhoto{&rep.A, &rep.B} {
		fmt.Fprintf(w, "%s (%dx%d): %d face(s) found by %s; compared face %d (%s)\n", ph.Path, ph.Width, ph.Height, len(ph.Faces), detectorWords(ph.Detector), ph.Compared, ph.Chosen)
		for _, f := range ph.Faces {
			mark := ""
			if f.Number == ph.Compared {
				mark = "  <- compared"
			}
			fmt.Fprintf(w, "  face %d: box x=%.1f y=%.1f w=%.1f h=%.1f score=%.3f%s\n", f.Number, f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height, f.Score, mark)
		}
	}
	verdict, rel := "different people", ">"
	if rep.Same {
		verdict, rel = "same person", "≤"
	}
	what := "Euclidean distance of the descriptors"
	if rep.Metric == eval.CosineDistance {
		what = "cosine distance of the head's embeddings"
	}
	fmt.Fprintf(w, "%s: %s %.4f %s threshold %.4f\n", verdict, what, rep.Distance, rel, rep.Threshold)
	fmt.Fprintf(w, "threshold: %s\n", rep.ThresholdSource)
	if rep.Meaning != "" {
		fmt.Fprintf(w, "%s\n", rep.Meaning)
	}
}

// detectorWords names a --detector value in a sentence: "the tiny
// detector", "both detectors".
func detectorWords(d string) string {
	if d == string(face.Both) {
		return "both detectors"
	}
	return "the " + d + " detector"
}

// comparePhoto lists the faces of the photo at path (decoded as img) that
// pp finds (--detector's, else both detectors': face.Fallback), picks one (number pick, or the largest for -1) and computes its vector:
// the descriptor, or the head's embedding when r is set.
func comparePhoto(pp *face.Fallback, r *headRunner, path string, img *imaging.RGB, pick int, flag string) (*comparedPhoto, error) {
	p, faces, err := pp.Detect(img)
	if err != nil {
		return nil, fmt.Errorf("photo %s: %w", path, err)
	}
	if len(faces) == 0 {
		o := pp.Primary().Options()
		return nil, &exitError{code: exitNoFace, err: fmt.Errorf("photo %s: no face found by either detector at --min-score %g, nor by both together (try a lower --min-score)", path, o.MinScore)}
	}
	ph := &comparedPhoto{Path: path, Width: img.W, Height: img.H, Faces: []faceBrief{}, Detector: string(p.Options().Detector)}
	for k, f := range faces {
		ph.Faces = append(ph.Faces, faceBrief{Number: k + 1, Box: f.Box, Score: f.Score})
	}
	idx, chosen := face.Largest(faces), "largest"
	if pick > 0 {
		if pick > len(faces) {
			return nil, fmt.Errorf("photo %s has %d face(s), numbered 1 to %d: %s %d is out of range", path, len(faces), len(faces), flag, pick)
		}
		idx, chosen = pick-1, flag
	}
	ph.Compared, ph.Chosen = idx+1, chosen
	one := []face.Face{faces[idx]}
	if _, err := p.Complete(img, one); err != nil {
		return nil, fmt.Errorf("photo %s: %w", path, err)
	}
	ph.Box = one[0].Box
	ph.vector = one[0].Descriptor
	if r != nil {
		emb, err := r.embedFaces(img, one)
		if err != nil {
			return nil, fmt.Errorf("photo %s: %w", path, err)
		}
		ph.vector = emb[0]
	}
	if len(ph.vector) == 0 {
		return nil, errors.New("internal error: the compared face has no vector")
	}
	return ph, nil
}

// headThreshold runs the LFW development protocol with the head (threshold
// best on pairsDevTrain.txt, rates on pairsDevTest.txt), the way veil
// verify --head does.
func (c *compareFlags) headThreshold(e *env, r *headRunner) (*eval.VerifyResult, error) {
	dir := c.lfw
	if dir == "" {
		dir = filepath.Join(datadir.Default(), "lfw")
	}
	train, err := dataset.ReadPairsFile(filepath.Join(dir, "pairsDevTrain.txt"))
	if err != nil {
		return nil, fmt.Errorf("choosing the head's threshold needs LFW's development pairs (--lfw, or give --threshold): %w", err)
	}
	test, err := dataset.ReadPairsFile(filepath.Join(dir, "pairsDevTest.txt"))
	if err != nil {
		return nil, fmt.Errorf("choosing the head's threshold needs LFW's development pairs (--lfw, or give --threshold): %w", err)
	}
	fmt.Fprintf(e.stderr, "choosing the head's threshold on LFW's development pairs in %s (cached after the first run)\n", dir)
	return verifyHead(e, r, c.headInputFlags(), eval.VerifyOptions{ImagesDir: filepath.Join(dir, "images_deepfunneled"), Test: test, Train: train})
}

// headInputFlags are the settings with which verifyHead describes LFW's
// images: compare's pipeline flags and cache.
func (c *compareFlags) headInputFlags() headFlags {
	return headFlags{models: c.pf.models, detector: c.pf.detector, align: c.pf.align, minScore: c.pf.minScore,
		cache: c.cacheDir, noCache: c.noCache, quiet: c.pf.quiet}
}
