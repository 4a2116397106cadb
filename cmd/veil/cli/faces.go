package cli

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/internal/progress"
)

// Exit statuses of the face commands.
const (
	exitFailed = 1 // some input could not be read or processed
	exitNoFace = 3 // `veil embed`: some input had no face to describe
)

// detectorHelp explains --detector both in the help of detect and embed.
const detectorHelp = `By default both of face-api's detectors run (--detector both): a face is kept
when either network alone scores it at least 0.5 (face-api's threshold), or
when both find it, their boxes overlapping, at lower scores (SSD's down to
0.01 when the tiny detector's reaches 0.4). On LFW's development test images
(every 9th) it finds the face of 96.5% of colour photos and 94.2% of their
greyscale copies; SSD alone 89.6% and 42.8%, the tiny detector alone 84.4%
and 88.4% (veil bench detect). --detector ssd or tiny runs one network, as
face-api does.`

// pipelineFlags are the flags shared by the commands that run the face pipeline.
type pipelineFlags struct {
	models   string
	detector string
	align    string
	minScore float64
	maxFaces int
	json     bool
	quiet    bool
	cmd      *cobra.Command // to tell a --min-score given from its default
}

func (f *pipelineFlags) register(cmd *cobra.Command, withAlign bool, defaultDetector string) {
	cmd.Flags().StringVar(&f.models, "models", "", "folder of face-api's weight files (default: $"+nets.EnvModels+", else models/ of the checkout, installed by scripts/install-models.sh)")
	cmd.Flags().StringVar(&f.detector, "detector", defaultDetector, "face detector: both (both networks, keeping a face either finds confidently or both find; misses least, see veil bench detect), ssd (SSD-MobileNet-v1 alone; fails on most greyscale photos) or tiny (tiny YOLO-style alone, about 2.5x faster than ssd)")
	if withAlign {
		cmd.Flags().StringVar(&f.align, "align", "both", "face alignment before the descriptor: both (the mean of the two descriptors below; measured best on LFW), faceapi (face-api's crop around eyes and mouth; reproduces face-api's descriptors) or dlib (similarity transform of 33 landmarks onto dlib's mean face)")
	}
	cmd.Flags().Float64Var(&f.minScore, "min-score", 0.5, "minimum detection score, in (0, 1); with --detector both, the score either network alone needs when given (faces both networks find keep their lower thresholds, capped at it)")
	cmd.Flags().IntVar(&f.maxFaces, "max-faces", 100, "at most this many faces per image")
	cmd.Flags().BoolVar(&f.json, "json", false, "print machine-readable JSON on stdout")
	cmd.Flags().BoolVarP(&f.quiet, "quiet", "q", false, "no progress output on stderr")
	f.cmd = cmd
}

// options checks the flags and turns them into the pipeline's options.
func (f *pipelineFlags) options() (face.Options, error) {
	checks := []flagCheck{
		oneOf("detector", f.detector, string(face.Both), string(face.SSD), string(face.Tiny)),
		openUnit("min-score", f.minScore),
		intIn("max-faces", f.maxFaces, 1, 10000),
	}
	if f.cmd != nil && f.cmd.Flags().Lookup("align") != nil {
		checks = append(checks, oneOf("align", f.align, string(face.AlignBoth), string(face.AlignFaceAPI), string(face.AlignDlib)))
	}
	if err := checkFlags(checks...); err != nil {
		return face.Options{}, err
	}
	opt := face.Options{
		ModelDir:      f.models,
		Detector:      face.Detector(f.detector),
		Align:         face.Align(f.align),
		MinScore:      f.minScore,
		MaxFaces:      f.maxFaces,
		TinyLandmarks: false,
	}
	if opt.Detector == face.Both && f.cmd != nil && f.cmd.Flags().Changed("min-score") {
		r := face.DefaultRule()
		r.SSD, r.Tiny = f.minScore, f.minScore
		r.PairSSD, r.PairTiny = min(r.PairSSD, f.minScore), min(r.PairTiny, f.minScore)
		opt.Rule = r
	}
	return opt, nil
}

// imageResult is one image's entry in the JSON output of detect and embed.
type imageResult struct {
	Path   string     `json:"path"`
	Width  int        `json:"width"`
	Height int        `json:"height"`
	Faces  []jsonFace `json:"faces"`
	Error  string     `json:"error,omitempty"`
}

type jsonFace struct {
	// Number is the face's number, from 1: as printed, drawn by --draw and
	// chosen by veil compare --face-a/--face-b.
	Number int      `json:"number"`
	Box    face.Box `json:"box"`
	Score  float64  `json:"score"`
	// Detector is the network whose box and score these are; with
	// --detector both, SSDScore and TinyScore are each network's score
	// for the face (0: that network did not find it).
	Detector   string       `json:"detector"`
	SSDScore   *float64     `json:"ssd_score,omitempty"`
	TinyScore  *float64     `json:"tiny_score,omitempty"`
	Landmarks  [][2]float64 `json:"landmarks"`
	Age        *float64     `json:"age,omitempty"`
	Gender     string       `json:"gender,omitempty"`
	GenderProb *float64     `json:"gender_probability,omitempty"`
	Descriptor []float32    `json:"descriptor,omitempty"`
}

func toJSONFace(number int, f *face.Face, ageGender bool) jsonFace {
	j := jsonFace{Number: number, Box: f.Box, Score: f.Score, Detector: string(f.Detector), Landmarks: f.Landmarks[:], Descriptor: f.Descriptor}
	if f.SSDScore > 0 || f.TinyScore > 0 {
		s, t := f.SSDScore, f.TinyScore
		j.SSDScore, j.TinyScore = &s, &t
	}
	if ageGender {
		age, p := f.Age, f.GenderProb
		j.Age, j.Gender, j.GenderProb = &age, f.Gender, &p
	}
	return j
}

// processed is the outcome of running the pipeline on one file.
type processed struct {
	img   *imaging.RGB
	faces []face.Face
	err   error // names the file
}

// runImages runs the pipeline over paths with one worker per core and
// returns the results in input order.
func runImages(e *env, p *face.Pipeline, paths []string, quiet bool) []processed {
	out := make([]processed, len(paths))
	bar := progress.New(e.stderr, "faces", len(paths), quiet || len(paths) < 4)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < engine.Parallelism(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				// DecodeFile's errors name the file already; the
				// pipeline's do not.
				img, _, err := imaging.DecodeFile(paths[i], imaging.DefaultLimits())
				if err != nil {
					out[i].err = err
					bar.Add(1)
					continue
				}
				faces, _, err := p.Run(img)
				if err != nil {
					err = fmt.Errorf("%s: %w", paths[i], err)
				}
				out[i] = processed{img: img, faces: faces, err: err}
				bar.Add(1)
			}
		}()
	}
	for i := range paths {
		work <- i
	}
	close(work)
	wg.Wait()
	bar.Done()
	return out
}

func newDetectCmd(e *env) *cobra.Command {
	var pf pipelineFlags
	var draw string
	var noAgeGender bool
	cmd := &cobra.Command{
		Use:   "detect IMAGE...",
		Short: "Find faces with their boxes, 68 landmarks, age and gender",
		Long: `Detect finds the faces in JPEG or PNG photos (EXIF orientation applied) and
reports for each face its box, detection score, 68 landmarks, estimated age and
gender. Coordinates are pixels of the oriented image.

` + detectorHelp + `

With --draw OUT.png (or OUT.jpg) the image is written with boxes and landmarks
drawn, each box tagged with its face's number, as PNG or JPEG as the
extension says; with several images, each goes to OUT-<image name>.png (or
.jpg). Faces are numbered from 1 in the listing, the JSON ("number") and the
drawing, as veil compare --face-a/--face-b and veil search number them.

Exit status: 0 when every image was read (an image without faces is not an
error: it is reported as such), 1 when some image could not be read or decoded.`,
		Example: `  veil detect photo.jpg
  veil detect --detector tiny --json *.jpg
  veil detect --draw out/faces.png photo.jpg`,
		Args: needArgs(1, -1, "photo"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt, err := pf.options()
			if err != nil {
				return err
			}
			if draw != "" {
				if _, err := imaging.FormatOf(draw); err != nil {
					return fmt.Errorf("--draw: %w", err)
				}
			}
			opt.AgeGender = !noAgeGender
			opt.TinyLandmarks = opt.Detector == face.Tiny
			p, err := e.pipeline(opt)
			if err != nil {
				return err
			}
			results := runImages(e, p, args, pf.quiet)
			return reportImages(e, &pf, args, results, draw, opt.AgeGender, false)
		},
	}
	pf.register(cmd, false, string(face.Both))
	cmd.Flags().StringVar(&draw, "draw", "", "write the image with boxes, face numbers and landmarks drawn to this file, PNG or JPEG as its extension (.png, .jpg, .jpeg) says")
	cmd.Flags().BoolVar(&noAgeGender, "no-age-gender", false, "skip the age/gender network")
	return cmd
}

func newEmbedCmd(e *env) *cobra.Command {
	var pf pipelineFlags
	var head string
	cmd := &cobra.Command{
		Use:   "embed IMAGE...",
		Short: "Compute a 128-d face descriptor for every face",
		Long: `Embed finds the faces in JPEG or PNG photos and computes dlib's 128-d ResNet
descriptor for each (not L2-normalised; the same person is usually within
Euclidean distance 0.6). --align both (default) averages the descriptors of
the two crops below, which measured best on LFW; --align faceapi reproduces
face-api's descriptors; --align dlib aligns 33 landmarks onto dlib's mean face.
Faces are found as by veil detect (--detector both by default).
With --head CKPT each face is embedded by a head trained with veil train
(--model head) instead: its "embedding" replaces the descriptor.

Exit status: 0 when every image gave at least one descriptor, 1 when some image
could not be read or decoded, 3 when some image had no face.`,
		Example: `  veil embed --json photo.jpg
  veil embed --align faceapi --detector tiny a.jpg b.png`,
		Args: needArgs(1, -1, "photo"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if head != "" {
				return runEmbedHead(e, &pf, head, args)
			}
			opt, err := pf.options()
			if err != nil {
				return err
			}
			opt.Descriptors = true
			p, err := e.pipeline(opt)
			if err != nil {
				return err
			}
			results := runImages(e, p, args, pf.quiet)
			return reportImages(e, &pf, args, results, "", false, true)
		},
	}
	pf.register(cmd, true, string(face.Both))
	cmd.Flags().StringVar(&head, "head", "", headFlagUsage)
	return cmd
}

// reportImages prints results as text or JSON, draws when asked, and turns
// failures into the documented exit status.
func reportImages(e *env, pf *pipelineFlags, paths []string, results []processed, draw string, ageGender, embed bool) error {
	var failed, noFace []string
	doc := struct {
		Images []imageResult `json:"images"`
	}{Images: make([]imageResult, len(paths))}
	for i, r := range results {
		ir := imageResult{Path: paths[i], Faces: []jsonFace{}}
		if r.err != nil {
			// r.err names the file (runImages).
			ir.Error = r.err.Error()
			failed = append(failed, ir.Error)
			doc.Images[i] = ir
			continue
		}
		ir.Width, ir.Height = r.img.W, r.img.H
		for k := range r.faces {
			ir.Faces = append(ir.Faces, toJSONFace(k+1, &r.faces[k], ageGender))
		}
		if len(r.faces) == 0 {
			noFace = append(noFace, paths[i])
		}
		doc.Images[i] = ir
		if draw != "" {
			out := drawPath(draw, paths[i], len(paths))
			if err := drawFaces(r.img, r.faces, out); err != nil {
				failed = append(failed, err.Error())
			} else if !pf.json {
				fmt.Fprintf(e.stdout, "drew %s -> %s\n", paths[i], out)
			} else {
				fmt.Fprintf(e.stderr, "drew %s -> %s\n", paths[i], out)
			}
		}
	}
	if pf.json {
		if err := writeJSON(e.stdout, doc); err != nil {
			return err
		}
	} else {
		printImages(e.stdout, doc.Images)
	}
	verb := ""
	if embed {
		verb = "describe"
	}
	return imagesOutcome(e, failed, noFace, len(paths), verb)
}

// printImages prints the faces found in each image read.
func printImages(w io.Writer, images []imageResult) {
	for _, ir := range images {
		if ir.Error != "" {
			continue
		}
		fmt.Fprintf(w, "%s (%dx%d): %d face(s)\n", ir.Path, ir.Width, ir.Height, len(ir.Faces))
		for _, f := range ir.Faces {
			fmt.Fprintf(w, "  face %d: box x=%.1f y=%.1f w=%.1f h=%.1f score=%.3f (%s", f.Number, f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height, f.Score, f.Detector)
			if f.SSDScore != nil {
				fmt.Fprintf(w, "; ssd %.3f, tiny %.3f", *f.SSDScore, *f.TinyScore)
			}
			fmt.Fprint(w, ")")
			if f.Age != nil {
				fmt.Fprintf(w, " age=%.1f gender=%s (%.2f)", *f.Age, f.Gender, *f.GenderProb)
			}
			if len(f.Descriptor) > 0 {
				fmt.Fprintf(w, " descriptor=[%.4f %.4f %.4f ...]", f.Descriptor[0], f.Descriptor[1], f.Descriptor[2])
			}
			fmt.Fprintln(w)
		}
	}
}

// imagesOutcome reports on stderr the images of a run over n images in
// which no face was found and those that failed, and returns the
// command's exit status: exitFailed if any failed, else exitNoFace if a
// face was needed (verb: what was to be done with it, "" if none was
// needed) and some image had none.
func imagesOutcome(e *env, failed, noFace []string, n int, verb string) error {
	for _, p := range noFace {
		fmt.Fprintf(e.stderr, "veil: %s: no face found\n", p)
	}
	if len(failed) > 0 {
		for _, f := range failed {
			fmt.Fprintf(e.stderr, "veil: %s\n", f)
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("%d of %d images failed", len(failed), n)}
	}
	if verb != "" && len(noFace) > 0 {
		return &exitError{code: exitNoFace, err: fmt.Errorf("no face to %s in %d of %d images", verb, len(noFace), n)}
	}
	return nil
}

// drawThickness is the width of drawn boxes for an image.
func drawThickness(img *imaging.RGB) int { return max(1, min(img.W, img.H)/300) }

// labelPlace returns where drawFaces puts face number n's tag for box b
// (its top-left corner, whole pixels) and the tag's scale: just above the
// box's top-left corner, or inside it when there is no room above.
func labelPlace(img *imaging.RGB, b face.Box, n int) (x, y float64, scale int) {
	scale = max(2, min(img.W, img.H)/160)
	_, h := imaging.LabelSize(n, scale)
	x, y = math.Round(b.X), math.Round(b.Y)-float64(h)
	if y < 0 {
		y = math.Round(b.Y) + float64(drawThickness(img))
	}
	return max(x, 0), y, scale
}

func drawPath(draw, img string, n int) string {
	if n == 1 {
		return draw
	}
	ext := filepath.Ext(draw)
	stem := strings.TrimSuffix(draw, ext)
	base := strings.TrimSuffix(filepath.Base(img), filepath.Ext(img))
	if ext == "" {
		ext = ".png"
	}
	return stem + "-" + base + ext
}

func drawFaces(img *imaging.RGB, faces []face.Face, out string) error {
	canvas := &imaging.RGB{W: img.W, H: img.H, Pix: append([]uint8(nil), img.Pix...)}
	thick := drawThickness(img)
	for _, f := range faces {
		b := f.Box
		canvas.DrawRect(b.X, b.Y, b.X+b.Width, b.Y+b.Height, thick, 0, 255, 0)
		for _, p := range f.Landmarks {
			canvas.DrawDot(p[0], p[1], thick+1, 255, 64, 0)
		}
	}
	// Numbers last, so no landmark covers one.
	for k, f := range faces {
		x, y, scale := labelPlace(img, f.Box, k+1)
		canvas.DrawLabel(x, y, k+1, scale, 0, 255, 0)
	}
	if dir := filepath.Dir(out); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("drawing: %w", err)
		}
	}
	format, err := imaging.FormatOf(out)
	if err != nil {
		return fmt.Errorf("drawing: %w", err)
	}
	fh, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("drawing: %w", err)
	}
	if err := canvas.Encode(fh, format); err != nil {
		fh.Close()
		return fmt.Errorf("drawing %s: %w", out, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("drawing %s: %w", out, err)
	}
	return nil
}
