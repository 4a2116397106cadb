package metric

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// DefaultThresholdQuantile is MatchThreshold's default quantile.
const DefaultThresholdQuantile = 0.05

// MatchThreshold carries a distance threshold chosen for plain descriptors
// (the Euclidean distance) over to the space of m, using only the named
// faces x (labels ≥ 0 name them; others are ignored).
//
// A learned map changes the scale of distances (LMNN's margin is in
// squared units) and not uniformly, so a threshold measured on plain
// descriptors means nothing under V. What a suggestion threshold must
// control is how close the nearest face of somebody else comes: for every
// named face, its nearest differently-named face (its nearest impostor).
// MatchThreshold takes the q-quantile of those nearest-impostor distances
// in each space and scales the plain threshold by their ratio:
//
//	T_V = T · Q_V(q) / Q_plain(q)
//
// so the low tail of impostors sits at the same place relative to the
// threshold in both spaces. For V = s·R (R orthogonal) it gives s·T
// exactly. It is a heuristic (a library has no strangers labelled to
// calibrate on); bench metric measures it. q must be in (0, 1); at least
// two people need named faces.
func MatchThreshold(m *Metric, x [][]float64, labels []int, plain, q float64) (float64, error) {
	if !(plain > 0) || math.IsInf(plain, 0) {
		return 0, fmt.Errorf("metric: plain threshold %v must be positive and finite", plain)
	}
	if !(q > 0 && q < 1) {
		return 0, fmt.Errorf("metric: quantile %v outside (0, 1)", q)
	}
	if len(x) != len(labels) {
		return 0, fmt.Errorf("metric: %d vectors but %d labels", len(x), len(labels))
	}
	var named [][]float64
	var lab []int
	for i, v := range x {
		if labels[i] < 0 {
			continue
		}
		if len(v) != m.in {
			return 0, fmt.Errorf("metric: vector %d has size %d, the map takes %d", i, len(v), m.in)
		}
		named = append(named, v)
		lab = append(lab, labels[i])
	}
	z := make([][]float64, len(named))
	for i, v := range named {
		z[i] = m.Transform(nil, v)
	}
	q0, err := impostorQuantile(named, lab, q)
	if err != nil {
		return 0, err
	}
	qv, err := impostorQuantile(z, lab, q)
	if err != nil {
		return 0, err
	}
	if q0 == 0 {
		return 0, errors.New("metric: named faces of different people coincide; cannot carry a threshold over")
	}
	return plain * qv / q0, nil
}

// impostorQuantile returns the q-quantile (lower) of each vector's
// distance to its nearest vector of another label.
func impostorQuantile(x [][]float64, labels []int, q float64) (float64, error) {
	var d []float64
	for i, a := range x {
		best := math.Inf(1)
		for j, b := range x {
			if labels[j] != labels[i] {
				var s float64
				for k := range a {
					t := a[k] - b[k]
					s += t * t
				}
				best = math.Min(best, s)
			}
		}
		if !math.IsInf(best, 1) {
			d = append(d, math.Sqrt(best))
		}
	}
	if len(d) == 0 {
		return 0, errors.New("metric: carrying a threshold over needs named faces of at least two people")
	}
	sort.Float64s(d)
	return d[int(q*float64(len(d)-1))], nil
}
