package eval

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Scores are similarity scores of pairs: higher means "more likely the same
// person" (Veil uses the negative Euclidean distance of descriptors).
// Same[i] says whether pair i really is a match.
type Scores struct {
	Score []float64
	Same  []bool
}

// Validate checks that the scores are usable: equal lengths, finite, and
// both classes present.
func (s Scores) Validate() error {
	if len(s.Score) != len(s.Same) {
		return fmt.Errorf("eval: %d scores for %d labels", len(s.Score), len(s.Same))
	}
	pos, neg := 0, 0
	for i, v := range s.Score {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("eval: score %d is not finite", i)
		}
		if s.Same[i] {
			pos++
		} else {
			neg++
		}
	}
	if pos == 0 || neg == 0 {
		return errors.New("eval: need both matched and mismatched pairs")
	}
	return nil
}

// subset returns the scores whose index satisfies keep.
func (s Scores) subset(keep func(i int) bool) Scores {
	var out Scores
	for i := range s.Score {
		if keep(i) {
			out.Score = append(out.Score, s.Score[i])
			out.Same = append(out.Same, s.Same[i])
		}
	}
	return out
}

// Accuracy is the fraction of pairs classified right when "same" is
// predicted for score >= threshold.
func (s Scores) Accuracy(threshold float64) float64 {
	if len(s.Score) == 0 {
		return 0
	}
	right := 0
	for i, v := range s.Score {
		if (v >= threshold) == s.Same[i] {
			right++
		}
	}
	return float64(right) / float64(len(s.Score))
}

// ClassRates returns, at threshold, the fraction of matched pairs called
// "same" (score >= threshold) and the fraction of mismatched pairs called
// "different" — what a user of the threshold can expect for each kind of
// pair. A rate is NaN when s holds no pair of that kind.
func (s Scores) ClassRates(threshold float64) (sameRight, differentRight float64) {
	var pos, neg, posRight, negRight int
	for i, v := range s.Score {
		if s.Same[i] {
			pos++
			if v >= threshold {
				posRight++
			}
		} else {
			neg++
			if v < threshold {
				negRight++
			}
		}
	}
	return float64(posRight) / float64(pos), float64(negRight) / float64(neg)
}

// BestThreshold returns the threshold that maximises accuracy on s, placed
// midway between adjacent distinct scores, and that accuracy. Ties in
// accuracy go to the median of the best thresholds, which is stabler than
// the first one found.
func (s Scores) BestThreshold() (threshold, accuracy float64) {
	n := len(s.Score)
	if n == 0 {
		return 0, 0
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return s.Score[idx[a]] < s.Score[idx[b]] })
	// Threshold below everything: all predicted same.
	right := 0
	for _, same := range s.Same {
		if same {
			right++
		}
	}
	best := right
	cands := []float64{s.Score[idx[0]] - 1}
	for k := 0; k < n; k++ {
		// Moving the threshold above score idx[k] flips that pair to "different".
		if s.Same[idx[k]] {
			right--
		} else {
			right++
		}
		if k+1 < n && s.Score[idx[k+1]] == s.Score[idx[k]] {
			continue
		}
		var thr float64
		if k+1 < n {
			thr = (s.Score[idx[k]] + s.Score[idx[k+1]]) / 2
		} else {
			thr = s.Score[idx[k]] + 1
		}
		switch {
		case right > best:
			best, cands = right, []float64{thr}
		case right == best:
			cands = append(cands, thr)
		}
	}
	return cands[len(cands)/2], float64(best) / float64(n)
}

// FoldResult is k-fold cross-validated verification accuracy.
type FoldResult struct {
	Accuracies []float64
	Thresholds []float64
	Mean, Std  float64
}

// KFold scores each fold with the threshold that is best on the other
// folds, as LFW's protocol prescribes. fold[i] is pair i's fold in
// [0, folds). With folds == 1 it is rejected: use a separate training set.
func KFold(s Scores, fold []int, folds int) (*FoldResult, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if folds < 2 {
		return nil, fmt.Errorf("eval: k-fold needs at least 2 folds, got %d", folds)
	}
	if len(fold) != len(s.Score) {
		return nil, fmt.Errorf("eval: %d fold labels for %d scores", len(fold), len(s.Score))
	}
	res := &FoldResult{}
	for k := 0; k < folds; k++ {
		train := s.subset(func(i int) bool { return fold[i] != k })
		test := s.subset(func(i int) bool { return fold[i] == k })
		if len(test.Score) == 0 || len(train.Score) == 0 {
			return nil, fmt.Errorf("eval: fold %d is empty", k)
		}
		thr, _ := train.BestThreshold()
		res.Thresholds = append(res.Thresholds, thr)
		res.Accuracies = append(res.Accuracies, test.Accuracy(thr))
	}
	res.Mean, res.Std = meanStd(res.Accuracies)
	return res, nil
}

// meanStd returns the mean and the population standard deviation, which is
// what LFW's published results report.
func meanStd(v []float64) (mean, std float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)))
}

// ROC summarises the score distributions independently of any threshold.
type ROC struct {
	AUC float64
	// EER is the equal error rate: where the false-accept and false-reject
	// rates meet (the mean of the two at the closest threshold).
	EER float64
	// TARAtFAR maps a false-accept rate to the true-accept rate at the
	// strictest threshold whose false-accept rate does not exceed it. With
	// N mismatched pairs, rates below 1/N mean "no false accept at all".
	TARAtFAR map[float64]float64
}

// ComputeROC computes AUC (Mann–Whitney, ties counted half), EER and the
// true-accept rate at each requested false-accept rate.
func ComputeROC(s Scores, fars ...float64) (*ROC, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var pos, neg []float64
	for i, v := range s.Score {
		if s.Same[i] {
			pos = append(pos, v)
		} else {
			neg = append(neg, v)
		}
	}
	sort.Float64s(pos)
	sort.Float64s(neg)
	// AUC = P(pos > neg) + P(pos == neg)/2.
	var wins float64
	j, k := 0, 0
	for _, p := range pos {
		for j < len(neg) && neg[j] < p {
			j++
		}
		for k < len(neg) && neg[k] <= p {
			k++
		}
		wins += float64(j) + float64(k-j)/2
	}
	roc := &ROC{AUC: wins / float64(len(pos)*len(neg)), TARAtFAR: map[float64]float64{}}

	// Sweep thresholds over all distinct scores; accept when score >= t.
	all := append(append([]float64{}, pos...), neg...)
	sort.Float64s(all)
	atLeast := func(sorted []float64, t float64) int {
		return len(sorted) - sort.SearchFloat64s(sorted, t)
	}
	bestGap := math.Inf(1)
	for i, t := range all {
		if i > 0 && all[i-1] == t {
			continue
		}
		far := float64(atLeast(neg, t)) / float64(len(neg))
		frr := 1 - float64(atLeast(pos, t))/float64(len(pos))
		if gap := math.Abs(far - frr); gap < bestGap {
			bestGap, roc.EER = gap, (far+frr)/2
		}
	}
	for _, target := range fars {
		if target < 0 || target > 1 || math.IsNaN(target) {
			return nil, fmt.Errorf("eval: false-accept rate %v is not in [0, 1]", target)
		}
		// Lowest threshold t (most accepts) with FAR(t) <= target. Thresholds
		// just above each impostor score are the candidates.
		allowed := int(math.Floor(target * float64(len(neg))))
		var t float64
		if allowed >= len(neg) {
			t = math.Inf(-1)
		} else {
			// Accept only scores strictly above the (allowed+1)-th highest impostor.
			t = math.Nextafter(neg[len(neg)-1-allowed], math.Inf(1))
		}
		roc.TARAtFAR[target] = float64(atLeast(pos, t)) / float64(len(pos))
	}
	return roc, nil
}
