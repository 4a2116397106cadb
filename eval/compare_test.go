package eval

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
)

func TestClassRates(t *testing.T) {
	s := Scores{
		Score: []float64{0.9, 0.8, 0.3, 0.7, 0.2, 0.1, 0.5},
		Same:  []bool{true, true, true, false, false, false, false},
	}
	cases := []struct {
		thr             float64
		same, different float64
	}{
		{0.5, 2.0 / 3, 2.0 / 4}, // 0.5 itself is called same
		{0.05, 1, 0},
		{0.95, 0, 1},
		{0.25, 1, 2.0 / 4},
	}
	for _, c := range cases {
		same, diff := s.ClassRates(c.thr)
		if same != c.same || diff != c.different {
			t.Errorf("ClassRates(%g) = %g, %g; want %g, %g", c.thr, same, diff, c.same, c.different)
		}
		// The two rates weigh up to Accuracy.
		if acc := (same*3 + diff*4) / 7; math.Abs(acc-s.Accuracy(c.thr)) > 1e-12 {
			t.Errorf("threshold %g: rates give accuracy %g, Accuracy says %g", c.thr, acc, s.Accuracy(c.thr))
		}
	}
}

func TestCompare(t *testing.T) {
	cases := []struct {
		name      string
		a, b      []float32
		m         Metric
		threshold float64
		same      bool
		distance  float64
		err       string
	}{
		{"euclidean near", []float32{0, 0}, []float32{0.3, 0.4}, Euclidean, 0.6, true, 0.5, ""},
		{"euclidean far", []float32{0, 0}, []float32{3, 4}, Euclidean, 0.6, false, 5, ""},
		{"default metric is euclidean", []float32{0, 0}, []float32{3, 4}, "", 6, true, 5, ""},
		{"at the threshold is same", []float32{0, 0}, []float32{3, 4}, Euclidean, 5, true, 5, ""},
		{"cosine same direction", []float32{1, 0}, []float32{5, 0}, CosineDistance, 0.1, true, 0, ""},
		{"cosine orthogonal", []float32{1, 0}, []float32{0, 2}, CosineDistance, 0.5, false, 1, ""},
		{"lengths differ", []float32{1, 0}, []float32{1}, Euclidean, 0.6, false, 0, "cannot be compared"},
		{"empty", nil, nil, CosineDistance, 0.6, false, 0, "cannot be compared"},
		{"zero threshold", []float32{1}, []float32{1}, Euclidean, 0, false, 0, "positive"},
		{"NaN threshold", []float32{1}, []float32{1}, Euclidean, math.NaN(), false, 0, "positive"},
		{"unknown metric", []float32{1}, []float32{1}, "manhattan", 1, false, 0, "unknown metric"},
		{"NaN vector", []float32{float32(math.NaN())}, []float32{1}, Euclidean, 1, false, 0, "not finite"},
	}
	for _, c := range cases {
		got, err := Compare(c.a, c.b, c.m, c.threshold)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got.Same != c.same || math.Abs(got.Distance-c.distance) > 1e-6 || got.Threshold != c.threshold || got.Metric == "" {
			t.Errorf("%s: got %+v, want same=%v distance %g", c.name, got, c.same, c.distance)
		}
	}
}

// TestVerifyWithCosine scores pairs whose vectors point the same way per
// person but have wildly different lengths: the cosine metric separates
// them perfectly, the Euclidean one does not, and the cosine run's
// accuracy is exactly the one of thresholding cosine similarities (how
// veil train scores a head), with the threshold reported as a distance.
func TestVerifyWithCosine(t *testing.T) {
	pf, err := dataset.ReadPairsFile(filepath.Join("..", "dataset", "testdata", "pairs_10fold.txt"))
	if err != nil {
		t.Fatal(err)
	}
	vec := func(path string) []float32 {
		name := filepath.Base(filepath.Dir(path))
		var h float64
		for _, c := range name {
			h = h*31 + float64(c%7)
		}
		angle := math.Mod(h, 6.28)
		scale := float32(1 + 40*float64(len(filepath.Base(path))%5))
		if strings.HasSuffix(path, "2.jpg") {
			scale *= 9
		}
		return []float32{scale * float32(math.Cos(angle)), scale * float32(math.Sin(angle))}
	}
	describe := func(path string) (Described, error) { return Described{Descriptor: vec(path)}, nil }
	single := &dataset.PairsFile{Folds: 1, Pairs: pf.Pairs, Fold: make([]int, len(pf.Pairs))}
	cos, err := Verify(VerifyOptions{ImagesDir: "/lfw", Test: single, Train: single, Metric: CosineDistance}, describe)
	if err != nil {
		t.Fatal(err)
	}
	euc, err := Verify(VerifyOptions{ImagesDir: "/lfw", Test: single, Train: single}, describe)
	if err != nil {
		t.Fatal(err)
	}
	if cos.Metric != CosineDistance || euc.Metric != Euclidean {
		t.Errorf("metrics reported %q and %q", cos.Metric, euc.Metric)
	}
	if !(cos.Accuracy > euc.Accuracy) {
		t.Errorf("cosine accuracy %g not above Euclidean %g: the metric is not used", cos.Accuracy, euc.Accuracy)
	}
	var s Scores
	for _, p := range single.Pairs {
		s.Score = append(s.Score, Cosine(vec(p.ImagePath("/lfw", false)), vec(p.ImagePath("/lfw", true))))
		s.Same = append(s.Same, p.Same)
	}
	thr, _ := s.BestThreshold()
	if cos.Accuracy != s.Accuracy(thr) || cos.Threshold != 1-thr {
		t.Errorf("cosine run: accuracy %g threshold %g; thresholding cosine similarities gives %g at distance %g", cos.Accuracy, cos.Threshold, s.Accuracy(thr), 1-thr)
	}
	same, diff := s.ClassRates(thr)
	if cos.SameRight != same || cos.DifferentRight != diff {
		t.Errorf("class rates %g, %g; want %g, %g", cos.SameRight, cos.DifferentRight, same, diff)
	}
	// Under k-fold the rates pool every fold's own verdicts.
	kf, err := Verify(VerifyOptions{ImagesDir: "/lfw", Test: pf, Metric: CosineDistance}, describe)
	if err != nil {
		t.Fatal(err)
	}
	folds, err := KFold(s, pf.Fold, pf.Folds)
	if err != nil {
		t.Fatal(err)
	}
	var sameRight, nSame, diffRight, nDifferent int
	for i, v := range s.Score {
		called := v >= folds.Thresholds[pf.Fold[i]]
		if s.Same[i] {
			nSame++
			if called {
				sameRight++
			}
		} else {
			nDifferent++
			if !called {
				diffRight++
			}
		}
	}
	if want := float64(sameRight) / float64(nSame); kf.SameRight != want {
		t.Errorf("k-fold: same-pair rate %g, want %g", kf.SameRight, want)
	}
	if want := float64(diffRight) / float64(nDifferent); kf.DifferentRight != want {
		t.Errorf("k-fold: different-pair rate %g, want %g", kf.DifferentRight, want)
	}
	if _, err := Verify(VerifyOptions{Test: single, Train: single, Metric: "hamming"}, describe); err == nil {
		t.Error("unknown metric accepted")
	}
}

// TestDescribeAllErrorWording checks the error DescribeAll hands to a
// command's user: it names the failing path exactly once (adding it only
// when the describer's error does not already) and has no package prefix.
func TestDescribeAllErrorWording(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"bare error", errors.New("no face found"), "b.jpg: no face found"},
		{"error naming the file", errors.New("cannot read b.jpg: permission denied"), "cannot read b.jpg: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			describe := func(p string) (Described, error) {
				if p == "b.jpg" {
					return Described{}, tc.err
				}
				return Described{Descriptor: make([]float32, 128)}, nil
			}
			_, err := DescribeAll([]string{"a.jpg", "b.jpg"}, 1, describe, nil)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("%v does not wrap the describer's error", err)
			}
		})
	}
}
