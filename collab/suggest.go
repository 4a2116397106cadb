package collab

import (
	"fmt"
	"math"
	"slices"

	"github.com/veil-privacy/veil/tagging/match"
)

// Library is one user's library as the experiment sees it: faces (one per
// photo, as in LFW), each of a person, and which persons are strangers
// (never named). Person numbers are the library's own.
type Library struct {
	Descs [][]float32
	// Public, if not nil, holds each face's public features.
	Public   [][]float32
	Person   []int
	Stranger map[int]bool
	// origin is each local person's index in the Split it was simulated
	// from (nil for libraries built otherwise).
	origin []int
}

// query is one unnamed face's two nearest named people in some space.
type query struct {
	stranger     bool
	truth        int64
	best, second match.PersonDistance
}

// Counts are a suggestion protocol's outcomes, summed over libraries and
// trials: faces of named people (Known) and of strangers, suggestions on
// each, and the right ones.
type Counts struct {
	Known, Strangers, Suggested, Right, StrangersSuggested int
}

// Score is what the experiment reports at one setting.
type Score struct {
	// Distance and Margin are the suggestion rule's setting in the space.
	Distance float64 `json:"distance"`
	Margin   float64 `json:"margin"`
	// Precision: right suggestions among those on named people's faces.
	Precision float64 `json:"precision"`
	// Coverage: share of named people's other faces that get a suggestion.
	Coverage float64 `json:"coverage"`
	// StrangersRate: share of strangers' faces that get one (all wrong).
	StrangersRate float64 `json:"strangers_rate"`
	Known         int     `json:"known_faces"`
	Strangers     int     `json:"stranger_faces"`
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// score turns counts into rates.
func (c Counts) score(dist, margin float64) Score {
	return Score{Distance: dist, Margin: margin, Precision: ratio(c.Right, c.Suggested), Coverage: ratio(c.Suggested, c.Known),
		StrangersRate: ratio(c.StrangersSuggested, c.Strangers), Known: c.Known, Strangers: c.Strangers}
}

// queries names the faces isNamed says, in the space's coordinates xs, and
// returns every other face's two nearest named people.
func queries(lib *Library, xs [][]float32, isNamed []bool) ([]query, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	g, err := match.NewGallery(len(xs[0]))
	if err != nil {
		return nil, err
	}
	for i, x := range xs {
		if isNamed[i] {
			if err := g.Add(int64(i), int64(i), int64(lib.Person[i])+1, x); err != nil {
				return nil, fmt.Errorf("collab: %w", err)
			}
		}
	}
	var out []query
	for i, x := range xs {
		if isNamed[i] {
			continue
		}
		b, s := g.Nearest(x, nil)
		out = append(out, query{stranger: lib.Stranger[lib.Person[i]], truth: int64(lib.Person[i]) + 1, best: b, second: s})
	}
	return out, nil
}

// count applies the library's suggestion rule (match.SuggestOptions) at a
// setting and adds the outcomes to c.
func (c *Counts) count(qs []query, dist, margin float64) {
	rule := match.SuggestOptions{Distance: dist, Margin: margin}
	for _, q := range qs {
		if q.stranger {
			c.Strangers++
		} else {
			c.Known++
		}
		if !rule.Accepts(q.best, q.second) {
			continue
		}
		if q.stranger {
			c.StrangersSuggested++
			continue
		}
		c.Suggested++
		if q.best.Person == q.truth {
			c.Right++
		}
	}
}

// Goal is a criterion for choosing a suggestion setting: the largest
// coverage with precision at least Precision and a strangers' rate below
// Strangers; when no setting meets both, precision first, then the fewest
// strangers, then coverage.
type Goal struct {
	Precision float64 `json:"precision_at_least"`
	Strangers float64 `json:"strangers_rate_below"`
}

// LibraryGoal is the criterion veil bench tagging --tune chose the
// library's thresholds by (cmd/veil/cli/bench_tagging.go, tagGoal):
// precision ≥ 98% and fewer than 5% of strangers' faces suggested, with 3
// named photos.
var LibraryGoal = Goal{Precision: 0.98, Strangers: 0.05}

func (g Goal) meets(s Score) bool { return s.Precision >= g.Precision && s.StrangersRate < g.Strangers }

// choose picks the setting over a grid of distances scale·[lo/100, 0.65]
// (step scale·0.01) and margins scale·[0, 0.10] by g, on sets of queries
// (one per library and trial) pooled.
func choose(sets [][]query, scale float64, g Goal, lo int) Score {
	var best Score
	var bestFeasible, first = false, true
	for di := lo; di <= 65; di++ {
		for mi := 0; mi <= 10; mi++ {
			d, m := scale*float64(di)/100, scale*float64(mi)/100
			s := scoreAt(sets, d, m)
			f := g.meets(s)
			if first || g.better(s, best, f, bestFeasible) {
				best, bestFeasible, first = s, f, false
			}
		}
	}
	return best
}

func (g Goal) better(a, b Score, fa, fb bool) bool {
	if fa != fb {
		return fa
	}
	if fa {
		return a.Coverage > b.Coverage
	}
	pa, pb := a.Precision >= g.Precision, b.Precision >= g.Precision
	if pa != pb {
		return pa
	}
	if a.StrangersRate != b.StrangersRate {
		return a.StrangersRate < b.StrangersRate
	}
	return a.Coverage > b.Coverage
}

// medianNearest is the median over the queries of the distance to the
// nearest named face: a space's scale.
func medianNearest(sets [][]query) float64 {
	var ds []float64
	for _, qs := range sets {
		for _, q := range qs {
			if !math.IsInf(q.best.Distance, 1) {
				ds = append(ds, q.best.Distance)
			}
		}
	}
	if len(ds) == 0 {
		return math.NaN()
	}
	return quickMedian(ds)
}

func quickMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
