package eval

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
)

func TestBestThresholdAndAccuracy(t *testing.T) {
	s := Scores{Score: []float64{0.9, 0.8, 0.7, 0.3, 0.2, 0.75}, Same: []bool{true, true, true, false, false, false}}
	thr, acc := s.BestThreshold()
	// Perfect separation is impossible (0.75 impostor sits between 0.7 and 0.8);
	// best is 5/6 with thresholds in (0.3,0.7) or (0.75,0.8).
	if math.Abs(acc-5.0/6) > 1e-12 {
		t.Fatalf("acc = %v, want 5/6", acc)
	}
	if got := s.Accuracy(thr); got != acc {
		t.Fatalf("Accuracy(%v) = %v, want %v", thr, got, acc)
	}
}

func TestKFold(t *testing.T) {
	// Two folds; in each, matched scores are 1 and mismatched 0, except one
	// outlier. Threshold from the other fold is 0.5: accuracy 3/4 and 4/4.
	s := Scores{
		Score: []float64{1, 1, 0, 1, 1, 1, 0, 0},
		Same:  []bool{true, true, false, false, true, true, false, false},
	}
	fold := []int{0, 0, 0, 0, 1, 1, 1, 1}
	r, err := KFold(s, fold, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Accuracies[0] != 0.75 || r.Accuracies[1] != 1 || r.Mean != 0.875 || math.Abs(r.Std-0.125) > 1e-12 {
		t.Fatalf("got %+v", r)
	}
	if _, err := KFold(s, fold, 1); err == nil {
		t.Fatal("1 fold accepted")
	}
}

func TestROC(t *testing.T) {
	tests := []struct {
		name string
		s    Scores
		auc  float64
		eer  float64
		tar  map[float64]float64
	}{
		{"separable", Scores{[]float64{3, 4, 1, 2}, []bool{true, true, false, false}}, 1, 0,
			map[float64]float64{0.1: 1, 0.5: 1}},
		{"reversed", Scores{[]float64{1, 2, 3, 4}, []bool{true, true, false, false}}, 0, 1,
			map[float64]float64{0.1: 0, 0.5: 0, 1: 1}},
		{"ties count half", Scores{[]float64{1, 1}, []bool{true, false}}, 0.5, 0.5,
			map[float64]float64{0.1: 0}},
		// pos {0.9,0.6,0.4}, neg {0.5,0.3,0.1}: wins 3+3+2 = 8 of 9.
		{"mixed", Scores{[]float64{0.9, 0.6, 0.4, 0.5, 0.3, 0.1}, []bool{true, true, true, false, false, false}}, 8.0 / 9, 1.0 / 3,
			map[float64]float64{0.001: 2.0 / 3, 0.34: 1, 0.67: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var fars []float64
			for f := range tc.tar {
				fars = append(fars, f)
			}
			r, err := ComputeROC(tc.s, fars...)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(r.AUC-tc.auc) > 1e-12 || math.Abs(r.EER-tc.eer) > 1e-12 {
				t.Fatalf("AUC %v EER %v, want %v %v", r.AUC, r.EER, tc.auc, tc.eer)
			}
			for f, want := range tc.tar {
				if math.Abs(r.TARAtFAR[f]-want) > 1e-12 {
					t.Errorf("TAR@FAR %v = %v, want %v", f, r.TARAtFAR[f], want)
				}
			}
		})
	}
	if _, err := ComputeROC(Scores{[]float64{1}, []bool{true}}); err == nil {
		t.Fatal("one class accepted")
	}
	if _, err := ComputeROC(Scores{[]float64{math.NaN(), 1}, []bool{true, false}}); err == nil {
		t.Fatal("NaN accepted")
	}
}

func TestVerifyWithSyntheticDescriptors(t *testing.T) {
	// Two folds; each person's images get descriptors near a per-person
	// point, so matched pairs are close and mismatched far: accuracy 1.
	pf, err := dataset.ReadPairsFile(filepath.Join("..", "dataset", "testdata", "pairs_10fold.txt"))
	if err != nil {
		t.Fatal(err)
	}
	describe := func(path string) (Described, error) {
		name := filepath.Base(filepath.Dir(path))
		var h float32
		for _, c := range name {
			h = h*31 + float32(c%7)
		}
		fb := strings.HasPrefix(name, "Other_1")
		return Described{Descriptor: []float32{h, h * 0.5, float32(len(filepath.Base(path))) * 1e-6}, Fallback: fb}, nil
	}
	res, err := Verify(VerifyOptions{ImagesDir: "/lfw", Test: pf, Workers: 2}, describe)
	if err != nil {
		t.Fatal(err)
	}
	if res.Folds != 10 || res.Pairs != 40 || res.Accuracy != 1 || res.AUC != 1 || res.NoFace != 2 {
		t.Fatalf("got %+v", res)
	}
	if _, ok := res.TARAtFAR["0.001"]; !ok {
		t.Fatalf("missing TAR@FAR 0.001: %v", res.TARAtFAR)
	}
	// A single set needs training pairs.
	single := &dataset.PairsFile{Folds: 1, Pairs: pf.Pairs, Fold: make([]int, len(pf.Pairs))}
	if _, err := Verify(VerifyOptions{Test: single}, describe); err == nil {
		t.Fatal("single set without training pairs accepted")
	}
	res, err = Verify(VerifyOptions{Test: single, Train: single}, describe)
	if err != nil || res.Accuracy != 1 || res.TrainPairs != 40 {
		t.Fatalf("single set: %+v %v", res, err)
	}
	// A describer error names the image.
	_, err = Verify(VerifyOptions{ImagesDir: "/lfw", Test: pf}, func(p string) (Described, error) {
		return Described{}, errors.New("boom")
	})
	if err == nil || !strings.Contains(err.Error(), "/lfw/") {
		t.Fatalf("err = %v", err)
	}
}

func TestCosine(t *testing.T) {
	cases := []struct {
		a, b []float32
		want float64
	}{
		{[]float32{1, 0}, []float32{2, 0}, 1},
		{[]float32{1, 0}, []float32{0, 3}, 0},
		{[]float32{1, 1}, []float32{-1, -1}, -1},
		{[]float32{3, 4}, []float32{4, 3}, 24.0 / 25},
		{[]float32{0, 0}, []float32{1, 0}, 0},
	}
	for _, c := range cases {
		if got := Cosine(c.a, c.b); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Cosine(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
