package eval

import (
	"fmt"
	"math"
)

// Metric names how the distance of two face vectors is measured.
type Metric string

// Metrics.
const (
	// Euclidean is the distance of the face pipeline's descriptors, which
	// are not normalised (dlib's convention: the same person is usually
	// within 0.6).
	Euclidean Metric = "euclidean"
	// CosineDistance is 1 − cosine similarity, in [0, 2]: the distance of
	// a trained head's L2-normalised embeddings, scored by cosine
	// similarity as veil train scores them.
	CosineDistance Metric = "cosine"
)

// similarity returns a score that is higher for more similar vectors and
// its conversion to the metric's distance: the negative Euclidean distance,
// or the cosine similarity itself, so that thresholds chosen on it are
// exactly those veil train chooses on cosine similarities.
func (m Metric) similarity(a, b []float32) (float64, error) {
	switch m {
	case Euclidean, "":
		d, err := Distance(a, b)
		return -d, err
	case CosineDistance:
		if len(a) == 0 || len(a) != len(b) {
			return 0, fmt.Errorf("vectors of lengths %d and %d cannot be compared", len(a), len(b))
		}
		return Cosine(a, b), nil
	}
	return 0, fmt.Errorf("eval: unknown metric %q (want %s or %s)", m, Euclidean, CosineDistance)
}

// distance converts a similarity score (or threshold) of similarity back
// to the metric's distance.
func (m Metric) distance(score float64) float64 {
	if m == CosineDistance {
		return 1 - score
	}
	return -score
}

// Distance returns the metric's distance of a and b, which must have the
// same, non-zero length.
func (m Metric) Distance(a, b []float32) (float64, error) {
	s, err := m.similarity(a, b)
	if err != nil {
		return 0, err
	}
	return m.distance(s), nil
}

// DescriptorThreshold is the Euclidean distance between two face
// descriptors at or below which Veil calls two faces the same person. It
// is the threshold veil verify chooses on LFW's 2,200 development training
// pairs (pairsDevTrain.txt: the midpoint of the gap with the best
// accuracy, 99.05% of those pairs right) with the face pipeline's
// defaults (tiny detector, second detector for doubtful faces, --align
// both, --min-score 0.5, pipeline veil-faces-4), measured by
//
//	veil verify --images ../shared/data/lfw/images_deepfunneled \
//	    --pairs ../shared/data/lfw/pairsDevTest.txt \
//	    --train-pairs ../shared/data/lfw/pairsDevTrain.txt --json
//
// On the 1,000 development test pairs (no person in common with the
// training pairs) it is right on 99.0% of the pairs: DescriptorSameRate
// and DescriptorDifferentRate. It agrees with dlib's own rule of thumb
// (the same person within 0.6). Descriptors computed with other pipeline
// settings (another --detector or --align) move distances a little; the
// threshold was not re-tuned for them.
const DescriptorThreshold = 0.5977042931484753

// DescriptorSameRate and DescriptorDifferentRate are what
// DescriptorThreshold means for a user: on LFW's development test pairs,
// the fraction of same-person pairs it calls the same person (493 of 500)
// and the fraction of different-person pairs it calls different (497 of
// 500), from the same command as DescriptorThreshold.
const (
	DescriptorSameRate      = 0.986
	DescriptorDifferentRate = 0.994
)

// Comparison is the verdict on two faces' vectors.
type Comparison struct {
	// Same says Distance is at most Threshold.
	Same      bool    `json:"same"`
	Distance  float64 `json:"distance"`
	Threshold float64 `json:"threshold"`
	Metric    Metric  `json:"metric"`
}

// Compare measures the distance of a and b with m and calls them the same
// person when it is at most threshold (a finite, positive distance).
func Compare(a, b []float32, m Metric, threshold float64) (Comparison, error) {
	if !(threshold > 0) || math.IsInf(threshold, 0) {
		return Comparison{}, fmt.Errorf("eval: threshold must be a positive, finite distance, got %g", threshold)
	}
	if m == "" {
		m = Euclidean
	}
	d, err := m.Distance(a, b)
	if err != nil {
		return Comparison{}, err
	}
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return Comparison{}, fmt.Errorf("eval: the distance of the two vectors is not finite")
	}
	return Comparison{Same: d <= threshold, Distance: d, Threshold: threshold, Metric: m}, nil
}
