package metric

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// MatchThreshold carries a suggestion distance chosen for plain
// descriptors (the Euclidean distance) over to the space of m, so that the
// same number of a library's unnamed faces receive a suggestion in both
// spaces.
//
// A learned map changes the scale of distances (LMNN's margin is in
// squared units), and not uniformly. The library's named faces cannot
// calibrate the new distance: LMNN was fitted to them, so it has pushed
// their impostors away, while faces it never saw (most of them strangers)
// move much less; a threshold scaled on the named faces' impostors let
// 57–63% of LFW's strangers receive a suggestion (veil bench metric). The
// unnamed faces carry no labels but were not fitted: MatchThreshold counts
// the unnamed faces whose nearest named face is within plain, k of them,
// and returns the distance under m between the k-th and (k+1)-th nearest
// in m's space. Which faces get a suggestion may change (that is what a
// better metric would do); how many does not.
//
// For m = s·R (R orthogonal) the same faces are suggested in both spaces.
// It needs at least one named and one unnamed face.
func MatchThreshold(m *Metric, named, unnamed [][]float64, plain float64) (float64, error) {
	if !(plain > 0) || math.IsInf(plain, 0) {
		return 0, fmt.Errorf("metric: plain threshold %v must be positive and finite", plain)
	}
	if len(named) == 0 || len(unnamed) == 0 {
		return 0, errors.New("metric: carrying a threshold over needs named and unnamed faces")
	}
	for _, set := range [2][][]float64{named, unnamed} {
		for i, v := range set {
			if len(v) != m.in {
				return 0, fmt.Errorf("metric: vector %d has size %d, the map takes %d", i, len(v), m.in)
			}
		}
	}
	tn := make([][]float64, len(named))
	for i, v := range named {
		tn[i] = m.Transform(nil, v)
	}
	k := 0
	dv := make([]float64, len(unnamed))
	z := make([]float64, m.out)
	for i, u := range unnamed {
		if nearestDist(u, named) <= plain {
			k++
		}
		dv[i] = nearestDist(m.Transform(z, u), tn)
	}
	sort.Float64s(dv)
	switch k {
	case 0:
		return dv[0] / 2, nil
	case len(dv):
		// Every face within: a hair beyond the farthest, so that rounding
		// (suggestions compare single-precision faceprints) keeps it in.
		return dv[len(dv)-1] * (1 + 1e-6), nil
	}
	return (dv[k-1] + dv[k]) / 2, nil
}

// nearestDist returns the distance from x to the nearest of set.
func nearestDist(x []float64, set [][]float64) float64 {
	best := math.Inf(1)
	for _, y := range set {
		var s float64
		for k := range x {
			t := x[k] - y[k]
			s += t * t
		}
		best = math.Min(best, s)
	}
	return math.Sqrt(best)
}
