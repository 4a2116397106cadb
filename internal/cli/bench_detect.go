package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/internal/progress"
)

// detectCriterion says when bench detect counts LFW's labelled face as found.
const detectCriterion = "an accepted face whose box contains the image centre and overlaps LFW's central face box " +
	"(face.FallbackBox: the median SSD box of LFW's deep-funnelled images, 0.39 × 0.47 of the side, centred) by IoU ≥ 0.3"

// detectFoundIoU is the IoU with face.FallbackBox above which a box
// containing the image centre is the labelled face. On LFW's deep-funnelled
// images nearly all detections scoring ≥ 0.5 that contain the centre
// overlap that box by 0.4 to 1 (SSD's tall boxes and the tiny detector's
// wide ones alike); 0.3 also admits the subject's face when it sits off
// centre (LFW George_W_Bush_0096: 0.37), while the low-scoring boxes of
// part of a face (eyes, mouth) mostly stay below it.
const detectFoundIoU = 0.3

// detectFloor is the score down to which bench detect keeps each
// network's detections: below every threshold it evaluates or tunes.
const detectFloor = 0.01

// detectSetOrder is the order sets are run and reported in.
var detectSetOrder = []string{"images", "test", "train"}

// detectCopies are the versions of each image measured.
var detectCopies = []string{"colour", "grey"}

// detectImage is one image copy's detections by both networks.
type detectImage struct {
	name      string
	w, h      int
	ssd, tiny []nets.Detection
}

// detectRow is one line of bench detect's results.
type detectRow struct {
	Set      string   `json:"set"`
	Copy     string   `json:"copy"`
	Detector string   `json:"detector"`
	Images   int      `json:"images"`
	Found    int      `json:"found"`
	Recall   float64  `json:"recall"`
	Other    int      `json:"other_faces"`
	Missed   []string `json:"missed,omitempty"`
}

type detectReport struct {
	Criterion  string      `json:"criterion"`
	TrainEvery int         `json:"train_every,omitempty"`
	TestEvery  int         `json:"test_every,omitempty"`
	Rule       face.Rule   `json:"rule"`
	SingleMin  float64     `json:"single_min_score"`
	Tuned      *detectTune `json:"tuned,omitempty"`
	Results    []detectRow `json:"results"`
	WallS      float64     `json:"wall_s"`
}

func newBenchDetectCmd(e *env) *cobra.Command {
	var (
		models, imagesDir, pairsPath, trainPath, cachePath string
		tune, listMissed, jsonOut, quiet                   bool
		trainEvery, testEvery                              int
	)
	cmd := &cobra.Command{
		Use:   "detect [IMAGE...] [--images DIR --pairs FILE [--train-pairs FILE [--tune]]]",
		Short: "Recall of the face detectors on LFW: labelled face found, colour and greyscale, per detector and combined",
		Long: `Bench detect measures how often each detector finds the labelled face of LFW-style
photos (one person, face centred), on each image in colour and as a greyscale
copy (ITU-R BT.601 luma replicated into RGB, imaging.RGB.Grey).

The face counts as found when ` + detectCriterion + `.
"other_faces" counts the accepted faces that are not the labelled one: other
people in the photo and false detections alike.

Detectors: "ssd" and "tiny" alone at score 0.5 (what --detector ssd|tiny
gives), "either" (a face either of them scores at least 0.5), and "both"
with face.DefaultRule (the default of detect, embed and the pipeline: also
a face both find at lower scores). With --tune the rule's thresholds are chosen on the
--train-pairs images (see "objective" in the output) and the tuned rule is
measured on every set as "both-tuned".

Images come from the arguments (set "images") or from the pairs files under
--images (sets "test" for --pairs, "train" for --train-pairs). Run it with
nice: it takes both cores for a while (LFW's development images: about
5,000 images, two copies, two networks).`,
		Example: `  nice veil bench detect --images ../shared/data/lfw/images_deepfunneled \
      --train-pairs ../shared/data/lfw/pairsDevTrain.txt --pairs ../shared/data/lfw/pairsDevTest.txt --tune --json
  veil bench detect --list-missed lfw/George_W_Bush/*.jpg`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if trainEvery < 1 || testEvery < 1 {
				return fmt.Errorf("--train-every and --test-every must be at least 1")
			}
			sets, err := detectSets(args, imagesDir, pairsPath, trainPath)
			if err != nil {
				return err
			}
			for set, n := range map[string]int{"train": trainEvery, "test": testEvery} {
				if paths, ok := sets[set]; ok {
					sets[set] = everyNth(paths, n)
				}
			}
			if tune && sets["train"] == nil {
				return fmt.Errorf("--tune needs --train-pairs (the rule is chosen on training images only)")
			}
			p, err := face.NewPipeline(face.Options{ModelDir: models, Detector: face.Both})
			if err != nil {
				return err
			}
			start := time.Now()
			data, err := detectRun(e, p, sets, cachePath, quiet)
			if err != nil {
				return err
			}
			rep := detectReport{Criterion: detectCriterion, Rule: p.Options().Rule, SingleMin: 0.5}
			if sets["train"] != nil {
				rep.TrainEvery = trainEvery
			}
			if sets["test"] != nil {
				rep.TestEvery = testEvery
			}
			if tune {
				t := tuneRule(data["train"])
				rep.Tuned = &t
			}
			for _, set := range detectSetOrder {
				imgs, ok := data[set]
				if !ok {
					continue
				}
				for c, copyName := range detectCopies {
					for _, r := range detectRules(rep.Rule, rep.Tuned) {
						rep.Results = append(rep.Results, r.measure(set, copyName, imgs[c], listMissed))
					}
				}
			}
			rep.WallS = time.Since(start).Seconds()
			if jsonOut {
				return writeJSON(e.stdout, rep)
			}
			printDetectReport(e, &rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&models, "models", "", "folder of face-api's weight files (default: $"+nets.EnvModels+", else models/ of the checkout)")
	cmd.Flags().StringVar(&imagesDir, "images", "", "folder of images laid out as DIR/Name/Name_0001.jpg, for --pairs and --train-pairs")
	cmd.Flags().StringVar(&pairsPath, "pairs", "", "pairs file (LFW's format) whose images form the test set")
	cmd.Flags().StringVar(&trainPath, "train-pairs", "", "pairs file whose images form the training set (for --tune)")
	cmd.Flags().StringVar(&cachePath, "detections", "", "file of the networks' detections: images already in it are not run again, new ones are appended (an interrupted run resumes; re-tuning takes seconds)")
	cmd.Flags().IntVar(&trainEvery, "train-every", 1, "use every n-th training image only (in name order), for a quicker run")
	cmd.Flags().IntVar(&testEvery, "test-every", 1, "use every n-th test image only (in name order), for a quicker run")
	cmd.Flags().BoolVar(&tune, "tune", false, "choose the combined rule's thresholds on the training set and measure them too")
	cmd.Flags().BoolVar(&listMissed, "list-missed", false, "list the images whose labelled face was not found")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print machine-readable JSON on stdout")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress output on stderr")
	return cmd
}

// everyNth returns every n-th of paths, starting with the first.
func everyNth(paths []string, n int) []string {
	if n <= 1 {
		return paths
	}
	var sub []string
	for i := 0; i < len(paths); i += n {
		sub = append(sub, paths[i])
	}
	return sub
}

// detectSets returns the image paths of each set, keyed "images", "test"
// and "train", each sorted and without repeats.
func detectSets(args []string, dir, pairsPath, trainPath string) (map[string][]string, error) {
	sets := map[string][]string{}
	if len(args) > 0 {
		sets["images"] = args
	}
	if (pairsPath != "" || trainPath != "") && dir == "" {
		return nil, fmt.Errorf("--pairs and --train-pairs need --images DIR")
	}
	if dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--images %s is not a folder", dir)
		}
	}
	for set, path := range map[string]string{"test": pairsPath, "train": trainPath} {
		if path == "" {
			continue
		}
		pf, err := eval.ReadPairsFile(path)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, p := range pf.Pairs {
			seen[p.ImagePath(dir, false)] = true
			seen[p.ImagePath(dir, true)] = true
		}
		for p := range seen {
			sets[set] = append(sets[set], p)
		}
		sort.Strings(sets[set])
	}
	if len(sets) == 0 {
		return nil, fmt.Errorf("no images: give image files, or --images DIR with --pairs or --train-pairs")
	}
	return sets, nil
}

// detectLine is one line of a --detections file: the detections of both
// networks on one copy of one image, boxes as [x, y, width, height, score].
// The first line of the file holds only Header.
type detectLine struct {
	Header string       `json:"header,omitempty"`
	Path   string       `json:"path,omitempty"`
	Copy   string       `json:"copy,omitempty"`
	W      int          `json:"w,omitempty"`
	H      int          `json:"h,omitempty"`
	SSD    [][5]float64 `json:"ssd,omitempty"`
	Tiny   [][5]float64 `json:"tiny,omitempty"`
}

// detectHeader identifies what a --detections file holds: the networks
// (their pinned weights), how they ran, and the floor.
func detectHeader() string {
	return fmt.Sprintf("veil bench detect v1|floor %g|ssd 512 iou 0.5|tiny 416 iou 0.4|grey bt601|weights %s", detectFloor, nets.PinnedDigest())
}

func toRows(d []nets.Detection) [][5]float64 {
	out := make([][5]float64, len(d))
	for i, x := range d {
		out[i] = [5]float64{x.X, x.Y, x.W, x.H, x.Score}
	}
	return out
}

func fromRows(r [][5]float64) []nets.Detection {
	out := make([]nets.Detection, len(r))
	for i, x := range r {
		out[i] = nets.Detection{X: x[0], Y: x[1], W: x[2], H: x[3], Score: x[4]}
	}
	return out
}

// readDetections loads a --detections file into a map keyed by path and
// copy index, and returns the length of its complete lines. A missing file
// is empty; a file of other settings is an error; a last line without its
// newline (cut short by an interrupted run) is left out.
func readDetections(path string) (map[string][2]*detectImage, int64, error) {
	have := map[string][2]*detectImage{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return have, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	complete := bytes.LastIndexByte(data, '\n') + 1
	lines := bytes.Split(data[:complete], []byte("\n"))
	for i, l := range lines {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var dl detectLine
		if err := json.Unmarshal(l, &dl); err != nil {
			return nil, 0, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		if i == 0 {
			if dl.Header != detectHeader() {
				return nil, 0, fmt.Errorf("%s holds detections of other settings (%q, want %q): use another file", path, dl.Header, detectHeader())
			}
			continue
		}
		c := slices.Index(detectCopies, dl.Copy)
		if c < 0 || dl.W <= 0 || dl.H <= 0 {
			return nil, 0, fmt.Errorf("%s line %d: bad copy %q or size %dx%d", path, i+1, dl.Copy, dl.W, dl.H)
		}
		e := have[dl.Path]
		e[c] = &detectImage{name: filepath.Base(dl.Path), w: dl.W, h: dl.H, ssd: fromRows(dl.SSD), tiny: fromRows(dl.Tiny)}
		have[dl.Path] = e
	}
	return have, int64(complete), nil
}

// detectRun runs both networks down to detectFloor on every image of every
// set, in colour and greyscale, one image per core at a time. With a
// detections file, images already in it are not run again and new ones
// are appended, so an interrupted run resumes. The result is indexed
// [set][copy][image].
func detectRun(e *env, p *face.Pipeline, sets map[string][]string, cachePath string, quiet bool) (map[string][2][]detectImage, error) {
	have := map[string][2]*detectImage{}
	var cache *os.File
	if cachePath != "" {
		var (
			err      error
			complete int64
		)
		if have, complete, err = readDetections(cachePath); err != nil {
			return nil, err
		}
		if cache, err = os.OpenFile(cachePath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, err
		}
		defer cache.Close()
		// Drop a line cut short by an interrupted run before appending.
		if err := cache.Truncate(complete); err != nil {
			return nil, err
		}
		if st, err := cache.Stat(); err == nil && st.Size() == 0 {
			if err := json.NewEncoder(cache).Encode(detectLine{Header: detectHeader()}); err != nil {
				return nil, err
			}
		}
	}
	type job struct {
		set string
		i   int
	}
	out := map[string][2][]detectImage{}
	var todo []job
	for _, set := range detectSetOrder {
		paths, ok := sets[set]
		if !ok {
			continue
		}
		out[set] = [2][]detectImage{make([]detectImage, len(paths)), make([]detectImage, len(paths))}
		for i, path := range paths {
			if h := have[path]; h[0] != nil && h[1] != nil {
				out[set][0][i], out[set][1][i] = *h[0], *h[1]
			} else {
				todo = append(todo, job{set, i})
			}
		}
	}
	bar := progress.New(e.stderr, "detecting", len(todo), quiet)
	jobs := make(chan job)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := 0; w < engine.Parallelism(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range jobs {
				path := sets[jb.set][jb.i]
				var res [2]detectImage
				err := func() error {
					img, _, err := imaging.DecodeFile(path, imaging.DefaultLimits())
					if err != nil {
						return err
					}
					for c, m := range []*imaging.RGB{img, img.Grey()} {
						ssd, err := p.Detections(m, face.SSD, detectFloor)
						if err != nil {
							return fmt.Errorf("%s: %w", path, err)
						}
						tiny, err := p.Detections(m, face.Tiny, detectFloor)
						if err != nil {
							return fmt.Errorf("%s: %w", path, err)
						}
						res[c] = detectImage{name: filepath.Base(path), w: m.W, h: m.H, ssd: ssd, tiny: tiny}
					}
					return nil
				}()
				mu.Lock()
				if err == nil {
					out[jb.set][0][jb.i], out[jb.set][1][jb.i] = res[0], res[1]
					if cache != nil {
						enc := json.NewEncoder(cache)
						for c, r := range res {
							if werr := enc.Encode(detectLine{Path: path, Copy: detectCopies[c], W: r.w, H: r.h, SSD: toRows(r.ssd), Tiny: toRows(r.tiny)}); werr != nil && err == nil {
								err = fmt.Errorf("writing %s: %w", cachePath, werr)
							}
						}
					}
				}
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				bar.Add(1)
			}
		}()
	}
	for _, jb := range todo {
		jobs <- jb
	}
	close(jobs)
	wg.Wait()
	bar.Done()
	return out, firstErr
}

// detectRule is one way of deciding which detections are faces.
type detectRule struct {
	name  string
	faces func(*detectImage) []face.Face
}

// detectRules are the rules bench detect measures: each network alone at
// face-api's 0.5, either of them ("either": what the two find at 0.5,
// without the pair condition), the default rule, and the tuned rule.
func detectRules(rule face.Rule, tuned *detectTune) []detectRule {
	either := rule
	either.PairSSD, either.PairTiny = 0.5, 0.5
	rs := []detectRule{
		{"ssd", func(d *detectImage) []face.Face { return singleFaces(d.ssd, 0.5) }},
		{"tiny", func(d *detectImage) []face.Face { return singleFaces(d.tiny, 0.5) }},
		{"either", func(d *detectImage) []face.Face { return either.Combine(d.ssd, d.tiny) }},
		{"both", func(d *detectImage) []face.Face { return rule.Combine(d.ssd, d.tiny) }},
	}
	if tuned != nil {
		t := tuned.Rule
		rs = append(rs, detectRule{"both-tuned", func(d *detectImage) []face.Face { return t.Combine(d.ssd, d.tiny) }})
	}
	return rs
}

// measure applies the rule to one copy of a set's images.
func (r detectRule) measure(set, copyName string, imgs []detectImage, listMissed bool) detectRow {
	row := detectRow{Set: set, Copy: copyName, Detector: r.name, Images: len(imgs)}
	for i := range imgs {
		d := &imgs[i]
		found, other := scoreFaces(r.faces(d), d.w, d.h)
		if found {
			row.Found++
		} else if listMissed {
			row.Missed = append(row.Missed, d.name)
		}
		row.Other += other
	}
	if row.Images > 0 {
		row.Recall = float64(row.Found) / float64(row.Images)
	}
	return row
}

// singleFaces are one network's detections scoring above min, as
// --detector ssd|tiny --min-score min reports them.
func singleFaces(dets []nets.Detection, min float64) []face.Face {
	var out []face.Face
	for _, d := range dets {
		if d.Score > min {
			out = append(out, face.Face{Box: face.Box{X: d.X, Y: d.Y, Width: d.W, Height: d.H}, Score: d.Score})
		}
	}
	return out
}

// scoreFaces says whether faces include the labelled face of a w×h LFW
// photo (detectCriterion) and how many of them are other faces.
func scoreFaces(faces []face.Face, w, h int) (found bool, other int) {
	ref := face.FallbackBox(w, h)
	cx, cy := float64(w)/2, float64(h)/2
	for _, f := range faces {
		if !found && f.Box.Contains(cx, cy) && f.Box.IoU(ref) >= detectFoundIoU {
			found = true
			continue
		}
		other++
	}
	return found, other
}

func printDetectReport(e *env, rep *detectReport) {
	w := e.stdout
	fmt.Fprintf(w, "labelled face found: %s\n", rep.Criterion)
	fmt.Fprintf(w, "rule \"both\": %+v\n", rep.Rule)
	if t := rep.Tuned; t != nil {
		fmt.Fprintf(w, "tuned on %d training images (colour and grey): %+v\n  objective: %s\n", t.Images, t.Rule, t.Objective)
	}
	fmt.Fprintf(w, "%-6s %-6s %-10s %7s %7s %8s %7s\n", "set", "copy", "detector", "images", "found", "recall", "other")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-6s %-6s %-10s %7d %7d %7.2f%% %7d\n", r.Set, r.Copy, r.Detector, r.Images, r.Found, 100*r.Recall, r.Other)
		for _, m := range r.Missed {
			fmt.Fprintf(w, "    missed %s\n", m)
		}
	}
	fmt.Fprintf(w, "wall time %.1f s\n", rep.WallS)
}

// detectTune is the rule --tune chose and how it did on the training set.
type detectTune struct {
	Rule      face.Rule `json:"rule"`
	Objective string    `json:"objective"`
	Images    int       `json:"images"`
	Found     int       `json:"found"`
	Other     int       `json:"other_faces"`
	Tried     int       `json:"rules_tried"`
}

// The grid --tune searches. The thresholds of either network alone stay at
// face-api's 0.5: looked at by eye on 180 LFW images, the other faces each
// network accepts there are nearly all real (people beside or behind the
// subject), so an objective counting them as errors would tune the
// detectors away from faces a person sees. What is tuned is when the two
// networks' agreement makes a doubtful face a face.
var (
	tunePairSSD  = []float64{0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.4}
	tunePairTiny = []float64{0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45}
	tunePairIoU  = []float64{0.3, 0.4, 0.5, 0.6}
)

const tuneObjective = "with each network alone at 0.5, most labelled faces found minus other faces accepted, " +
	"colour and grey copies together (the rule's extra faces are counted as false, though some are people " +
	"in the background); ties to fewer other faces, then higher thresholds"

// tuneRule searches the grid for the rule with the best objective on the
// training images (both copies).
func tuneRule(train [2][]detectImage) detectTune {
	type cand struct {
		r            face.Rule
		found, other int
	}
	var rules []face.Rule
	for _, ps := range tunePairSSD {
		for _, pt := range tunePairTiny {
			for _, iou := range tunePairIoU {
				rules = append(rules, face.Rule{SSD: 0.5, Tiny: 0.5, PairSSD: ps, PairTiny: pt, PairIoU: iou})
			}
		}
	}
	res := make([]cand, len(rules))
	detParallelRules(len(rules), func(k int) {
		c := cand{r: rules[k]}
		for _, imgs := range train {
			for i := range imgs {
				d := &imgs[i]
				found, other := scoreFaces(c.r.Combine(d.ssd, d.tiny), d.w, d.h)
				if found {
					c.found++
				}
				c.other += other
			}
		}
		res[k] = c
	})
	sum := func(r face.Rule) float64 { return r.PairSSD + r.PairTiny + r.PairIoU }
	best := res[0]
	for _, c := range res[1:] {
		a, b := c.found-c.other, best.found-best.other
		if a > b || a == b && (c.other < best.other || c.other == best.other && sum(c.r) > sum(best.r)) {
			best = c
		}
	}
	return detectTune{Rule: best.r, Objective: tuneObjective, Images: len(train[0]), Found: best.found, Other: best.other, Tried: len(rules)}
}

// detParallelRules runs fn(0..n-1) on one goroutine per core.
func detParallelRules(n int, fn func(k int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < engine.Parallelism(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				fn(k)
			}
		}()
	}
	for k := range n {
		next <- k
	}
	close(next)
	wg.Wait()
}
