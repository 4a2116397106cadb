package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/vec"
)

// DetectCriterion says when the detection benchmark counts LFW's labelled
// face as found.
const DetectCriterion = "an accepted face whose box contains the image centre and overlaps LFW's central face box " +
	"(face.FallbackBox: the median SSD box of LFW's deep-funnelled images, 0.39 × 0.47 of the side, centred) by IoU ≥ 0.3"

// DetectFoundIoU is the IoU with face.FallbackBox above which a box
// containing the image centre is the labelled face. On LFW's deep-funnelled
// images nearly all detections scoring ≥ 0.5 that contain the centre
// overlap that box by 0.4 to 1 (SSD's tall boxes and the tiny detector's
// wide ones alike); 0.3 also admits the subject's face when it sits off
// centre (LFW George_W_Bush_0096: 0.37), while the low-scoring boxes of
// part of a face (eyes, mouth) mostly stay below it.
const DetectFoundIoU = 0.3

// DetectFloor is the score down to which the benchmark keeps each
// network's detections: below every threshold it evaluates or tunes.
const DetectFloor = 0.01

// DetectSetOrder is the order sets are run and reported in.
var DetectSetOrder = []string{"images", "test", "train", SideSet}

// SideSet is the set of side crops (SideCrops): every face found in them
// counts as another face ("other_faces"), none as found.
const SideSet = "sides"

// sideSuffixes are the crops SideCrops takes of each photo, as the
// suffixes of their paths.
var sideSuffixes = []string{"#left", "#right"}

// SideCrops returns the side crops of every n-th of paths: the left and
// right quarters of each photo (62 × 250 pixels of an LFW photo), which lie
// outside LFW's central face box (face.FallbackBox spans 0.31 to 0.70 of
// the width) and hold background, shoulders, and in a good many LFW photos
// other people, whole or cut. Each is named by its photo's path and
// "#left" or "#right". The second pass runs on every crop in which the
// first finds nothing, as on a library's photos without a face, so the
// faces found there bound the false faces it adds: each is a false face or
// a person beside the subject, which only a look can tell apart.
func SideCrops(paths []string, n int) []string {
	var out []string
	for _, p := range EveryNth(paths, n) {
		for _, side := range sideSuffixes {
			out = append(out, p+side)
		}
	}
	return out
}

// sideCrop cuts the crop a SideCrops path names out of img; ok is
// false for the path of a whole photo.
func sideCrop(img *imaging.RGB, path string) (crop *imaging.RGB, ok bool, err error) {
	q := img.W / 4
	switch {
	case strings.HasSuffix(path, "#left"):
		crop, err = img.Crop(0, 0, q, img.H)
	case strings.HasSuffix(path, "#right"):
		crop, err = img.Crop(img.W-q, 0, q, img.H)
	default:
		return img, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("side crop of %s: %w", path, err)
	}
	return crop, true, nil
}

// DetectCopies are the versions of each image measured: the photo and its
// greyscale copy (imaging.RGB.Grey).
var DetectCopies = []string{"colour", "grey"}

// DetectImage is one image copy's detections by both networks, as
// face.Pipeline.DetectBoth returns them (the second pass when the
// pipeline's rule found no face in the first), and the photo's kinds
// (PhotoKinds, of the colour photo).
type DetectImage struct {
	Name  string
	W, H  int
	Det   face.Detections
	Kinds []string
	// pass2 says whether the second pass's need was checked ("ran",
	// "skipped"); empty for a detections file of the first version.
	pass2 string
}

// DetectRow is one line of the benchmark's results.
type DetectRow struct {
	Set      string      `json:"set"`
	Copy     string      `json:"copy"`
	Detector string      `json:"detector"`
	Images   int         `json:"images"`
	Found    int         `json:"found"`
	Recall   float64     `json:"recall"`
	Other    int         `json:"other_faces"`
	Missed   []string    `json:"missed,omitempty"`
	ByKind   []KindCount `json:"by_kind"`
}

// KindCount is how many images of one kind (PhotoKinds) a rule was
// measured on and in how many it found the labelled face.
type KindCount struct {
	Kind   string  `json:"kind"`
	Images int     `json:"images"`
	Found  int     `json:"found"`
	Recall float64 `json:"recall"`
}

// EveryNth returns every n-th of paths, starting with the first.
func EveryNth(paths []string, n int) []string {
	if n <= 1 {
		return paths
	}
	var sub []string
	for i := 0; i < len(paths); i += n {
		sub = append(sub, paths[i])
	}
	return sub
}

// DetectSets returns the image paths of each set, keyed "images" (args),
// "test" (the images of pairsPath under dir) and "train" (of trainPath),
// the last two sorted and without repeats.
func DetectSets(args []string, dir, pairsPath, trainPath string) (map[string][]string, error) {
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
		pf, err := dataset.ReadPairsFile(path)
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

// detectLine is one line of a detections file: the detections of both
// networks on one copy of one image, boxes as [x, y, width, height,
// score], the second pass's when it ran, and the photo's kinds. The first
// line of the file holds only Header.
type detectLine struct {
	Header    string       `json:"header,omitempty"`
	Path      string       `json:"path,omitempty"`
	Copy      string       `json:"copy,omitempty"`
	W         int          `json:"w,omitempty"`
	H         int          `json:"h,omitempty"`
	SSD       [][5]float64 `json:"ssd,omitempty"`
	Tiny      [][5]float64 `json:"tiny,omitempty"`
	Pass2     string       `json:"pass2,omitempty"`
	RetrySSD  [][5]float64 `json:"retry_ssd,omitempty"`
	RetryTiny [][5]float64 `json:"retry_tiny,omitempty"`
	Kinds     []string     `json:"kinds,omitempty"`
}

// detectHeaderV1 identifies a detections file of the first version: the
// networks (their pinned weights), how they ran, and the floor; no second
// pass, no kinds. Its lines are read and completed (second pass, kinds)
// where a run needs them.
func detectHeaderV1() string {
	return fmt.Sprintf("veil bench detect v1|floor %g|ssd 512 iou 0.5|tiny 416 iou 0.4|grey bt601|weights %s", DetectFloor, nets.PinnedDigest())
}

// DetectHeader identifies what a detections file holds: the first
// version's settings, the second pass and the rule that decides it.
func DetectHeader() string {
	r := face.DefaultRule()
	return fmt.Sprintf("veil bench detect v2|floor %g|ssd 512 iou 0.5|tiny 416 iou 0.4|grey bt601|weights %s|retry pad %g if no face by %+v|kinds v1",
		DetectFloor, nets.PinnedDigest(), face.RetryPad, r)
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

func (d *DetectImage) line(path, copyName string) detectLine {
	l := detectLine{Path: path, Copy: copyName, W: d.W, H: d.H, SSD: toRows(d.Det.SSD), Tiny: toRows(d.Det.Tiny), Pass2: d.pass2, Kinds: d.Kinds}
	if r := d.Det.Retry; r != nil {
		l.RetrySSD, l.RetryTiny = toRows(r.SSD), toRows(r.Tiny)
	}
	return l
}

// ReadDetections loads a detections file into a map keyed by path and
// copy index (as DetectCopies), and returns the length of its complete
// lines. A missing file is empty; a file of other settings is an error; a
// last line without its newline (cut short by an interrupted run) is left
// out; a later line for the same image copy replaces an earlier one.
func ReadDetections(path string) (map[string][2]*DetectImage, int64, error) {
	have := map[string][2]*DetectImage{}
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
			if dl.Header != DetectHeader() && dl.Header != detectHeaderV1() {
				return nil, 0, fmt.Errorf("%s holds detections of other settings (%q, want %q): use another file", path, dl.Header, DetectHeader())
			}
			continue
		}
		c := slices.Index(DetectCopies, dl.Copy)
		if c < 0 || dl.W <= 0 || dl.H <= 0 {
			return nil, 0, fmt.Errorf("%s line %d: bad copy %q or size %dx%d", path, i+1, dl.Copy, dl.W, dl.H)
		}
		switch {
		case dl.Pass2 == "" && (dl.RetrySSD != nil || dl.RetryTiny != nil),
			dl.Pass2 != "" && dl.Pass2 != "ran" && dl.Pass2 != "skipped":
			return nil, 0, fmt.Errorf("%s line %d: bad second pass %q", path, i+1, dl.Pass2)
		}
		for _, k := range dl.Kinds {
			if !slices.Contains(PhotoKindNames, k) {
				return nil, 0, fmt.Errorf("%s line %d: unknown kind %q", path, i+1, k)
			}
		}
		d := &DetectImage{Name: filepath.Base(dl.Path), W: dl.W, H: dl.H, Kinds: dl.Kinds, pass2: dl.Pass2,
			Det: face.Detections{SSD: fromRows(dl.SSD), Tiny: fromRows(dl.Tiny)}}
		if dl.Pass2 == "ran" {
			d.Det.Retry = &face.Detections{SSD: fromRows(dl.RetrySSD), Tiny: fromRows(dl.RetryTiny)}
		}
		e := have[dl.Path]
		e[c] = d
		have[dl.Path] = e
	}
	return have, int64(complete), nil
}

// DetectRunOptions configure RunDetect.
type DetectRunOptions struct {
	// Pipeline runs the networks: Detector Both, DefaultRule (the rule
	// that decides the second pass, named in DetectHeader).
	Pipeline *face.Pipeline
	// Sets are the image paths of each set (DetectSets).
	Sets map[string][]string
	// Cache, when set, is a detections file: image copies already in it
	// are not run again, new ones are appended, so an interrupted run
	// resumes and re-tuning takes seconds.
	Cache string
	// Workers is how many images run at once (default GOMAXPROCS).
	Workers int
	// Progress, when set, is called once with the images to run (done 0)
	// and after each, from one goroutine at a time.
	Progress func(done, total int)
}

func (o *DetectRunOptions) validate() error {
	if o.Pipeline == nil {
		return errors.New("eval: detection run without a pipeline")
	}
	opt := o.Pipeline.Options()
	if opt.Detector != face.Both || opt.Rule != face.DefaultRule() || opt.SinglePass {
		return fmt.Errorf("eval: detection run needs a pipeline of Detector Both with DefaultRule and the second pass (got %s, %+v, single pass %v)", opt.Detector, opt.Rule, opt.SinglePass)
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Workers < 1 {
		return fmt.Errorf("eval: %d workers", o.Workers)
	}
	return nil
}

// RunDetect runs both networks down to DetectFloor on every image of every
// set, in colour and greyscale (face.Pipeline.DetectBoth, with its second
// pass where DefaultRule finds no face), and measures the photo's kinds.
// Image copies read from the cache with everything a run needs are not run
// again; a copy of a first-version file lacks the second pass's check and
// the kinds, and is completed (only the kinds are measured when the first
// pass found a face). The result is indexed [set][copy][image].
func RunDetect(ctx context.Context, opt DetectRunOptions) (map[string][2][]DetectImage, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	p := opt.Pipeline
	rule := p.Options().Rule
	have := map[string][2]*DetectImage{}
	var cache *os.File
	if opt.Cache != "" {
		var (
			err      error
			complete int64
		)
		if have, complete, err = ReadDetections(opt.Cache); err != nil {
			return nil, err
		}
		if cache, err = os.OpenFile(opt.Cache, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, err
		}
		defer cache.Close()
		// Drop a line cut short by an interrupted run before appending.
		if err := cache.Truncate(complete); err != nil {
			return nil, err
		}
		if st, err := cache.Stat(); err == nil && st.Size() == 0 {
			if err := json.NewEncoder(cache).Encode(detectLine{Header: DetectHeader()}); err != nil {
				return nil, err
			}
		}
	}
	type job struct {
		set string
		i   int
		// kindsOnly: the cached detections are complete; measure kinds.
		kindsOnly bool
	}
	// complete reports whether a cached copy needs nothing more, and
	// whether only its kinds are missing.
	complete := func(d *DetectImage) (done, kindsOnly bool) {
		if d == nil {
			return false, false
		}
		pass2 := d.pass2 != "" || len(rule.Combine(d.Det.SSD, d.Det.Tiny)) > 0
		return pass2 && len(d.Kinds) > 0, pass2
	}
	out := map[string][2][]DetectImage{}
	var todo []job
	for _, set := range DetectSetOrder {
		paths, ok := opt.Sets[set]
		if !ok {
			continue
		}
		out[set] = [2][]DetectImage{make([]DetectImage, len(paths)), make([]DetectImage, len(paths))}
		for i, path := range paths {
			h := have[path]
			d0, k0 := complete(h[0])
			d1, k1 := complete(h[1])
			switch {
			case d0 && d1:
				out[set][0][i], out[set][1][i] = *h[0], *h[1]
			default:
				todo = append(todo, job{set, i, k0 && k1})
			}
		}
	}
	if opt.Progress != nil {
		opt.Progress(0, len(todo))
	}
	jobs := make(chan job)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		done     int
	)
	for range opt.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range jobs {
				path := opt.Sets[jb.set][jb.i]
				var res [2]DetectImage
				err := func() error {
					img, _, err := imaging.DecodeFile(strings.TrimSuffix(strings.TrimSuffix(path, "#left"), "#right"), imaging.DefaultLimits())
					if err != nil {
						return err
					}
					img, crop, err := sideCrop(img, path)
					if err != nil {
						return err
					}
					kinds := []string{SideSet}
					if !crop {
						if kinds, err = PhotoKinds(p, img); err != nil {
							return fmt.Errorf("%s: %w", path, err)
						}
					}
					for c, m := range []*imaging.RGB{img, img.Grey()} {
						if jb.kindsOnly {
							res[c] = *have[path][c]
						} else {
							det, err := p.DetectBoth(m, DetectFloor, DetectFloor)
							if err != nil {
								return fmt.Errorf("%s: %w", path, err)
							}
							res[c] = DetectImage{Name: filepath.Base(path), W: m.W, H: m.H, Det: det, pass2: "skipped"}
							if det.Retry != nil {
								res[c].pass2 = "ran"
							}
						}
						res[c].Kinds = kinds
					}
					return nil
				}()
				mu.Lock()
				if err == nil {
					out[jb.set][0][jb.i], out[jb.set][1][jb.i] = res[0], res[1]
					if cache != nil {
						enc := json.NewEncoder(cache)
						for c := range res {
							if werr := enc.Encode(res[c].line(path, DetectCopies[c])); werr != nil && err == nil {
								err = fmt.Errorf("writing %s: %w", opt.Cache, werr)
							}
						}
					}
				}
				if err != nil && firstErr == nil {
					firstErr = err
				}
				done++
				if opt.Progress != nil {
					opt.Progress(done, len(todo))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, jb := range todo {
		select {
		case jobs <- jb:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return out, firstErr
}

// DetectRule is one way of deciding which detections are faces.
type DetectRule struct {
	Name  string
	Faces func(*DetectImage) []face.Face
}

// DetectRules are the rules the benchmark measures: each network alone at
// face-api's 0.5, either of them ("either": what the two find at 0.5,
// without the pair condition), the rule on the first pass alone ("both":
// Detector Both before the second pass existed), the rule with the second
// pass ("both+retry": what Detector Both does), and the tuned rule on the
// first pass.
func DetectRules(rule face.Rule, tuned *DetectTune) []DetectRule {
	either := rule
	either.PairSSD, either.PairTiny = 0.5, 0.5
	rs := []DetectRule{
		{"ssd", func(d *DetectImage) []face.Face { return SingleFaces(d.Det.SSD, 0.5) }},
		{"tiny", func(d *DetectImage) []face.Face { return SingleFaces(d.Det.Tiny, 0.5) }},
		{"either", func(d *DetectImage) []face.Face { return either.Combine(d.Det.SSD, d.Det.Tiny) }},
		{"both", func(d *DetectImage) []face.Face { return rule.Combine(d.Det.SSD, d.Det.Tiny) }},
		{"both+retry", func(d *DetectImage) []face.Face { return rule.Faces(&d.Det) }},
	}
	if tuned != nil {
		t := tuned.Rule
		rs = append(rs, DetectRule{"both-tuned", func(d *DetectImage) []face.Face { return t.Combine(d.Det.SSD, d.Det.Tiny) }})
	}
	return rs
}

// Measure applies the rule to one copy of a set's images, in all and by
// kind (PhotoKindNames order; kinds no image has are left out). In the
// SideSet every face is another face.
func (r DetectRule) Measure(set, copyName string, imgs []DetectImage, listMissed bool) DetectRow {
	row := DetectRow{Set: set, Copy: copyName, Detector: r.Name, Images: len(imgs)}
	byKind := map[string]*KindCount{}
	for i := range imgs {
		d := &imgs[i]
		faces := r.Faces(d)
		found, other := false, len(faces)
		if set != SideSet {
			found, other = ScoreFaces(faces, d.W, d.H)
		}
		if found {
			row.Found++
		} else if listMissed && set != SideSet {
			row.Missed = append(row.Missed, d.Name)
		}
		row.Other += other
		for _, k := range d.Kinds {
			c := byKind[k]
			if c == nil {
				c = &KindCount{Kind: k}
				byKind[k] = c
			}
			c.Images++
			if found {
				c.Found++
			}
		}
	}
	if row.Images > 0 {
		row.Recall = float64(row.Found) / float64(row.Images)
	}
	row.ByKind = []KindCount{}
	for _, k := range PhotoKindNames {
		if c := byKind[k]; c != nil {
			c.Recall = float64(c.Found) / float64(c.Images)
			row.ByKind = append(row.ByKind, *c)
		}
	}
	return row
}

// SingleFaces are one network's detections scoring above min, as
// --detector ssd|tiny --min-score min reports them.
func SingleFaces(dets []nets.Detection, min float64) []face.Face {
	var out []face.Face
	for _, d := range dets {
		if d.Score > min {
			out = append(out, face.Face{Box: face.Box{X: d.X, Y: d.Y, Width: d.W, Height: d.H}, Score: d.Score})
		}
	}
	return out
}

// ScoreFaces says whether faces include the labelled face of a w×h LFW
// photo (DetectCriterion) and how many of them are other faces.
func ScoreFaces(faces []face.Face, w, h int) (found bool, other int) {
	ref := face.FallbackBox(w, h)
	cx, cy := float64(w)/2, float64(h)/2
	for _, f := range faces {
		if !found && f.Box.Contains(cx, cy) && f.Box.IoU(ref) >= DetectFoundIoU {
			found = true
			continue
		}
		other++
	}
	return found, other
}

// DetectTune is the rule TuneDetectRule chose and how it did on the
// training set.
type DetectTune struct {
	Rule      face.Rule `json:"rule"`
	Objective string    `json:"objective"`
	Images    int       `json:"images"`
	Found     int       `json:"found"`
	Other     int       `json:"other_faces"`
	Tried     int       `json:"rules_tried"`
}

// The grid TuneDetectRule searches. The thresholds of either network alone
// stay at face-api's 0.5: looked at by eye on 180 LFW images, the other
// faces each network accepts there are nearly all real (people beside or
// behind the subject), so an objective counting them as errors would tune
// the detectors away from faces a person sees. What is tuned is when the
// two networks' agreement makes a doubtful face a face.
var (
	TunePairSSD  = []float64{0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.4}
	TunePairTiny = []float64{0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45}
	TunePairIoU  = []float64{0.3, 0.4, 0.5, 0.6}
)

// TuneObjective is what TuneDetectRule maximises.
const TuneObjective = "with each network alone at 0.5, most labelled faces found minus other faces accepted, " +
	"colour and grey copies together, first pass only (the rule's extra faces are counted as false, though some are people " +
	"in the background); ties to fewer other faces, then higher thresholds"

// TuneDetectRule searches the grid for the rule with the best objective
// on the training images (both copies), using workers goroutines.
func TuneDetectRule(train [2][]DetectImage, workers int) DetectTune {
	type cand struct {
		r            face.Rule
		found, other int
	}
	var rules []face.Rule
	for _, ps := range TunePairSSD {
		for _, pt := range TunePairTiny {
			for _, iou := range TunePairIoU {
				rules = append(rules, face.Rule{SSD: 0.5, Tiny: 0.5, PairSSD: ps, PairTiny: pt, PairIoU: iou})
			}
		}
	}
	res := make([]cand, len(rules))
	vec.ParallelFor(len(rules), workers, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			c := cand{r: rules[k]}
			for _, imgs := range train {
				for i := range imgs {
					d := &imgs[i]
					found, other := ScoreFaces(c.r.Combine(d.Det.SSD, d.Det.Tiny), d.W, d.H)
					if found {
						c.found++
					}
					c.other += other
				}
			}
			res[k] = c
		}
	})
	sum := func(r face.Rule) float64 { return r.PairSSD + r.PairTiny + r.PairIoU }
	best := res[0]
	for _, c := range res[1:] {
		a, b := c.found-c.other, best.found-best.other
		if a > b || a == b && (c.other < best.other || c.other == best.other && sum(c.r) > sum(best.r)) {
			best = c
		}
	}
	return DetectTune{Rule: best.r, Objective: TuneObjective, Images: len(train[0]), Found: best.found, Other: best.other, Tried: len(rules)}
}
