package eval

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/internal/vec"
)

// Described is what a Describer returns for one image.
type Described struct {
	Descriptor []float32
	// Fallback is true when no face was detected and a fallback was used.
	Fallback bool
	// LowScore is true when the face was found only below the usual
	// detection threshold.
	LowScore bool
	// SecondDetector is true when the face came from a second detector
	// consulted because the first one's face was doubtful.
	SecondDetector bool
}

// Describer turns an image file into a face descriptor.
type Describer func(path string) (Described, error)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// ImagesDir is laid out as DIR/Name/Name_0001.jpg.
	ImagesDir string
	// Test holds the pairs to score. With several folds it is scored by
	// k-fold cross-validation; with one fold, Train must be given and its
	// best threshold is applied to Test.
	Test  *dataset.PairsFile
	Train *dataset.PairsFile
	// Workers is the number of images described at once (default 1).
	Workers int
	// FARs are the false-accept rates to report TAR at (default 1e-1, 1e-2, 1e-3).
	FARs []float64
	// Progress, if set, is called after each image.
	Progress func()
	// Metric measures the distance of two images' vectors (default
	// Euclidean).
	Metric Metric
}

// VerifyResult is the outcome of a verification run. Distances are
// measured by Metric; Threshold is the distance at or below which pairs
// are "same".
type VerifyResult struct {
	Pairs       int     `json:"pairs"`
	Folds       int     `json:"folds"`
	Accuracy    float64 `json:"accuracy"`
	AccuracyStd float64 `json:"accuracy_std"`
	Threshold   float64 `json:"threshold"`
	Metric      Metric  `json:"metric"`
	// SameRight and DifferentRight split Accuracy by kind of test pair:
	// the fraction of same-person pairs called same and of
	// different-person pairs called different (with each fold's own
	// threshold under k-fold).
	SameRight      float64            `json:"same_pairs_right"`
	DifferentRight float64            `json:"different_pairs_right"`
	AUC            float64            `json:"auc"`
	EER            float64            `json:"eer"`
	TARAtFAR       map[string]float64 `json:"tar_at_far"`
	Images         int                `json:"images"`
	NoFace         int                `json:"no_face"`
	LowScore       int                `json:"low_score_faces"`
	// SecondDetector counts faces taken from the second detector.
	SecondDetector int     `json:"second_detector_faces"`
	Fallback       string  `json:"fallback"`
	TrainPairs     int     `json:"train_pairs,omitempty"`
	TrainAcc       float64 `json:"train_accuracy,omitempty"`
}

// Verify describes every image the pairs name and scores the pairs.
func Verify(opt VerifyOptions, describe Describer) (*VerifyResult, error) {
	if opt.Test == nil || len(opt.Test.Pairs) == 0 {
		return nil, errors.New("eval: no test pairs")
	}
	if opt.Test.Folds == 1 && (opt.Train == nil || len(opt.Train.Pairs) == 0) {
		return nil, errors.New("eval: a single-set pairs file needs training pairs to choose the threshold (e.g. pairsDevTrain.txt)")
	}
	if opt.Workers < 1 {
		opt.Workers = 1
	}
	if opt.FARs == nil {
		opt.FARs = []float64{1e-1, 1e-2, 1e-3}
	}
	if opt.Metric == "" {
		opt.Metric = Euclidean
	}
	if _, err := opt.Metric.similarity([]float32{1}, []float32{1}); err != nil {
		return nil, err
	}
	// Every distinct image, described once.
	var paths []string
	seen := map[string]bool{}
	add := func(pf *dataset.PairsFile) {
		if pf == nil {
			return
		}
		for _, p := range pf.Pairs {
			for _, second := range []bool{false, true} {
				path := p.ImagePath(opt.ImagesDir, second)
				if !seen[path] {
					seen[path] = true
					paths = append(paths, path)
				}
			}
		}
	}
	add(opt.Test)
	if opt.Test.Folds == 1 {
		add(opt.Train)
	}
	sort.Strings(paths)
	descs, err := DescribeAll(paths, opt.Workers, describe, opt.Progress)
	if err != nil {
		return nil, err
	}
	res := &VerifyResult{Pairs: len(opt.Test.Pairs), Folds: opt.Test.Folds, Images: len(paths), TARAtFAR: map[string]float64{}, Metric: opt.Metric}
	for _, d := range descs {
		if d.Fallback {
			res.NoFace++
		}
		if d.LowScore {
			res.LowScore++
		}
		if d.SecondDetector {
			res.SecondDetector++
		}
	}
	scores := func(pf *dataset.PairsFile) (Scores, error) {
		s := Scores{Score: make([]float64, len(pf.Pairs)), Same: make([]bool, len(pf.Pairs))}
		for i, p := range pf.Pairs {
			a, b := descs[p.ImagePath(opt.ImagesDir, false)], descs[p.ImagePath(opt.ImagesDir, true)]
			v, err := opt.Metric.similarity(a.Descriptor, b.Descriptor)
			if err != nil {
				return s, fmt.Errorf("eval: pair %d (%s %d / %s %d): %w", i+1, p.Name1, p.Num1, p.Name2, p.Num2, err)
			}
			s.Score[i], s.Same[i] = v, p.Same
		}
		return s, nil
	}
	test, err := scores(opt.Test)
	if err != nil {
		return nil, err
	}
	if opt.Test.Folds > 1 {
		kf, err := KFold(test, opt.Test.Fold, opt.Test.Folds)
		if err != nil {
			return nil, err
		}
		res.Accuracy, res.AccuracyStd = kf.Mean, kf.Std
		var thr float64
		for _, t := range kf.Thresholds {
			thr += t
		}
		res.Threshold = opt.Metric.distance(thr / float64(len(kf.Thresholds)))
		// Each pair judged by its own fold's threshold, pooled.
		var folded Scores
		for i, v := range test.Score {
			folded.Score = append(folded.Score, v-kf.Thresholds[opt.Test.Fold[i]])
			folded.Same = append(folded.Same, test.Same[i])
		}
		res.SameRight, res.DifferentRight = folded.ClassRates(0)
	} else {
		train, err := scores(opt.Train)
		if err != nil {
			return nil, err
		}
		if err := train.Validate(); err != nil {
			return nil, fmt.Errorf("eval: training pairs: %w", err)
		}
		thr, trainAcc := train.BestThreshold()
		res.Threshold, res.TrainPairs, res.TrainAcc = opt.Metric.distance(thr), len(opt.Train.Pairs), trainAcc
		if err := test.Validate(); err != nil {
			return nil, err
		}
		res.Accuracy = test.Accuracy(thr)
		res.SameRight, res.DifferentRight = test.ClassRates(thr)
	}
	roc, err := ComputeROC(test, opt.FARs...)
	if err != nil {
		return nil, err
	}
	res.AUC, res.EER = roc.AUC, roc.EER
	for f, tar := range roc.TARAtFAR {
		res.TARAtFAR[strconv.FormatFloat(f, 'g', -1, 64)] = tar
	}
	return res, nil
}

// DescribeAll runs describe on every path with the given number of workers
// (at least one), calling progress after each image. It stops handing out
// paths at the first error and returns that error, naming the path once
// and in the user's words (the error is shown to the user of a command as
// it is: no package prefix, and no second copy of a path the describer's
// error already names, as imaging's file errors do).
func DescribeAll(paths []string, workers int, describe Describer, progress func()) (map[string]Described, error) {
	out := make(map[string]Described, len(paths))
	var mu sync.Mutex
	var firstErr error
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				d, err := describe(p)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					if !strings.Contains(err.Error(), p) {
						firstErr = fmt.Errorf("%s: %w", p, err)
					}
				}
				out[p] = d
				mu.Unlock()
				if progress != nil {
					progress()
				}
			}
		}()
	}
	for _, p := range paths {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		work <- p
	}
	close(work)
	wg.Wait()
	return out, firstErr
}

// Distance is the Euclidean distance of two descriptors of equal length,
// by the project's one descriptor distance (vec.SqDist32, which the
// tagging library's scans use too).
func Distance(a, b []float32) (float64, error) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, fmt.Errorf("descriptors of lengths %d and %d cannot be compared", len(a), len(b))
	}
	return math.Sqrt(float64(vec.SqDist32(a, b))), nil
}

// Cosine returns the cosine similarity of a and b (0 if either is zero).
// Both must have the same length.
func Cosine(a, b []float32) float64 {
	var d, na, nb float64
	for k := range a {
		d += float64(a[k]) * float64(b[k])
		na += float64(a[k]) * float64(a[k])
		nb += float64(b[k]) * float64(b[k])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return d / math.Sqrt(na*nb)
}
