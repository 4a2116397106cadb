package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/internal/progress"
)

// DetectReport is the detection benchmark's report (veil bench detect):
// a row per set, copy and detector rule.
type DetectReport struct {
	Criterion  string      `json:"criterion"`
	TrainEvery int         `json:"train_every,omitempty"`
	TestEvery  int         `json:"test_every,omitempty"`
	SidesOf    string      `json:"sides_of,omitempty"`
	SidesEvery int         `json:"sides_every,omitempty"`
	Rule       face.Rule   `json:"rule"`
	RetryPad   float64     `json:"retry_pad"`
	SingleMin  float64     `json:"single_min_score"`
	Tuned      *DetectTune `json:"tuned,omitempty"`
	Results    []DetectRow `json:"results"`
	WallS      float64     `json:"wall_s"`
}

// DetectBenchOptions configure a DetectBench.
type DetectBenchOptions struct {
	// Images form the set "images"; ImagesDir with Pairs and TrainPairs
	// (LFW's pairs format) the sets "test" and "train" (DetectSets).
	Images                       []string
	ImagesDir, Pairs, TrainPairs string
	// TrainEvery and TestEvery keep every n-th image of the training and
	// test sets (at least 1; 0 means 1).
	TrainEvery, TestEvery int
	// SidesEvery > 0 adds the set SideSet: the side crops of every n-th
	// test image, or of Images when there is no test set.
	SidesEvery int
	// Tune chooses the combined rule's thresholds on the training set
	// and measures the tuned rule too.
	Tune bool
	// ListMissed lists the images whose labelled face was not found.
	ListMissed bool
	// Cache is the detections file (DetectRunOptions.Cache); "": none.
	Cache string
	// Workers is how many images run at once (0: GOMAXPROCS).
	Workers int
	// Progress receives a progress bar; nil: none.
	Progress io.Writer
}

// DetectBench measures the detectors' recall on LFW-style photos.
type DetectBench struct {
	o    DetectBenchOptions
	sets map[string][]string
	rep  DetectReport
}

// NewDetectBench checks o and lists the images of every set.
func NewDetectBench(o DetectBenchOptions) (*DetectBench, error) {
	if o.TrainEvery == 0 {
		o.TrainEvery = 1
	}
	if o.TestEvery == 0 {
		o.TestEvery = 1
	}
	if o.TrainEvery < 1 || o.TestEvery < 1 || o.SidesEvery < 0 {
		return nil, fmt.Errorf("eval: train every %d, test every %d, sides every %d: the first two must be at least 1, the last at least 0",
			o.TrainEvery, o.TestEvery, o.SidesEvery)
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	sets, err := DetectSets(o.Images, o.ImagesDir, o.Pairs, o.TrainPairs)
	if err != nil {
		return nil, err
	}
	b := &DetectBench{o: o, sets: sets, rep: DetectReport{Criterion: DetectCriterion, RetryPad: face.RetryPad, SingleMin: 0.5}}
	for set, n := range map[string]int{"train": o.TrainEvery, "test": o.TestEvery} {
		if paths, ok := sets[set]; ok {
			sets[set] = EveryNth(paths, n)
		}
	}
	if o.Tune && sets["train"] == nil {
		return nil, fmt.Errorf("--tune needs --train-pairs (the rule is chosen on training images only)")
	}
	if o.SidesEvery > 0 {
		b.rep.SidesOf, b.rep.SidesEvery = "test", o.SidesEvery
		if sets["test"] == nil {
			b.rep.SidesOf = "images"
		}
		sets[SideSet] = SideCrops(sets[b.rep.SidesOf], o.SidesEvery)
	}
	if sets["train"] != nil {
		b.rep.TrainEvery = o.TrainEvery
	}
	if sets["test"] != nil {
		b.rep.TestEvery = o.TestEvery
	}
	return b, nil
}

// Run runs the networks of p on every set (RunDetect: p must be of
// Detector Both with DefaultRule), tunes the rule when asked, and
// measures every rule of DetectRules on every set and copy.
func (b *DetectBench) Run(ctx context.Context, p *face.Pipeline) (*DetectReport, error) {
	if p == nil {
		return nil, errors.New("eval: detection bench without a pipeline")
	}
	rep := b.rep
	rep.Rule = p.Options().Rule
	start := time.Now()
	var bar *progress.Bar
	data, err := RunDetect(ctx, DetectRunOptions{Pipeline: p, Sets: b.sets, Cache: b.o.Cache,
		Workers: b.o.Workers, Progress: func(done, total int) {
			if bar == nil {
				bar = progress.New(b.o.Progress, "detecting", total, b.o.Progress == nil)
			} else {
				bar.Add(1)
			}
		}})
	if bar != nil {
		bar.Done()
	}
	if err != nil {
		return nil, err
	}
	if b.o.Tune {
		t := TuneDetectRule(data["train"], b.o.Workers)
		rep.Tuned = &t
	}
	for _, set := range DetectSetOrder {
		imgs, ok := data[set]
		if !ok {
			continue
		}
		for c, copyName := range DetectCopies {
			for _, r := range DetectRules(rep.Rule, rep.Tuned) {
				rep.Results = append(rep.Results, r.Measure(set, copyName, imgs[c], b.o.ListMissed))
			}
		}
	}
	rep.WallS = time.Since(start).Seconds()
	return &rep, nil
}
