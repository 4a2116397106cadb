package tagbench

import (
	"math"
	"math/rand/v2"

	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/match"
)

// query is one unnamed face's two nearest people.
type query struct {
	stranger     bool
	truth        int64
	best, second match.PersonDistance
	// knn are the three nearest named faces' people, nearest first (for
	// the k-NN vote the suggestion rule was compared with).
	knn [3]match.PersonDistance
}

// queries names `named` random photos of every non-stranger person
// (trial chooses which) and returns every other face's two nearest people.
func queries(s *Split, named int, trial uint64) ([]query, error) {
	g, err := match.NewGallery(len(s.descs[0]))
	if err != nil {
		return nil, err
	}
	isNamed, namedIdx := chooseNamed(s, named, trial)
	for _, i := range namedIdx {
		if err := g.Add(int64(i), int64(i), int64(s.identity[i])+1, s.descs[i]); err != nil {
			return nil, err
		}
	}
	var out []query
	for i, d := range s.descs {
		if isNamed[i] {
			continue
		}
		p := s.identity[i]
		b, sec := g.Nearest(d, nil)
		q := query{stranger: s.stranger[p], truth: int64(p) + 1, best: b, second: sec}
		for k := range q.knn {
			q.knn[k].Distance = math.Inf(1)
		}
		for _, j := range namedIdx {
			dj := tagging.Distance(d, s.descs[j])
			for k := range q.knn {
				if dj < q.knn[k].Distance {
					copy(q.knn[k+1:], q.knn[k:len(q.knn)-1])
					q.knn[k] = match.PersonDistance{Person: int64(s.identity[j]) + 1, Distance: dj}
					break
				}
			}
		}
		out = append(out, q)
	}
	return out, nil
}

// chooseNamed draws the `named` photos the user names of every
// non-stranger person (trial chooses which): per face whether it is named,
// and the named faces in person order.
func chooseNamed(s *Split, named int, trial uint64) (isNamed []bool, namedIdx []int) {
	rng := rand.New(rand.NewPCG(trial, 0x5eed))
	byPerson := make([][]int, s.people)
	for i, p := range s.identity {
		byPerson[p] = append(byPerson[p], i)
	}
	isNamed = make([]bool, len(s.descs))
	for p, faces := range byPerson {
		if s.stranger[p] {
			continue
		}
		f := append([]int(nil), faces...)
		rng.Shuffle(len(f), func(i, j int) { f[i], f[j] = f[j], f[i] })
		for _, i := range f[:min(named, len(f))] {
			isNamed[i] = true
			namedIdx = append(namedIdx, i)
		}
	}
	return isNamed, namedIdx
}

// SuggestScore is the suggestion protocol's outcome at one setting.
type SuggestScore struct {
	Distance float64 `json:"distance"`
	Margin   float64 `json:"margin"`
	// Precision: share of the suggestions on named people's other faces
	// that name the right person.
	Precision float64 `json:"precision"`
	// Coverage: share of named people's other faces that get a suggestion.
	Coverage float64 `json:"coverage"`
	// CorrectCoverage: share that get the right suggestion.
	CorrectCoverage float64 `json:"correct_coverage"`
	// StrangersSuggested: share of strangers' faces that get a suggestion.
	StrangersSuggested float64 `json:"strangers_suggested"`
	// PrecisionAll counts suggestions on strangers as wrong too.
	PrecisionAll float64 `json:"precision_all"`
	Known        int     `json:"known_faces"`
	Strangers    int     `json:"stranger_faces"`
}

// scoreKNN applies the 3-NN vote instead: the person with at least two
// of the three nearest named faces, if the nearest of them is within dist
// (no margin: the vote is the abstention).
func scoreKNN(qs []query, dist, _ float64) SuggestScore {
	conv := make([]query, len(qs))
	for i, q := range qs {
		c := query{stranger: q.stranger, truth: q.truth}
		votes := map[int64]int{}
		for _, n := range q.knn {
			if n.Person != 0 {
				votes[n.Person]++
			}
		}
		for _, n := range q.knn {
			if n.Person != 0 && votes[n.Person] >= 2 {
				c.best = n // the nearest face of the majority person
				break
			}
		}
		conv[i] = c
	}
	return scoreSuggest(conv, dist, 0)
}

// scoreSuggest applies Suggest's rule (one face per photo here, so the
// same-photo rules do not arise) at a distance and margin.
func scoreSuggest(qs []query, dist, margin float64) SuggestScore {
	s := SuggestScore{Distance: dist, Margin: margin}
	rule := match.SuggestOptions{Distance: dist, Margin: margin}
	var sugK, rightK, sugS int
	for _, q := range qs {
		if q.stranger {
			s.Strangers++
		} else {
			s.Known++
		}
		if !rule.Accepts(q.best, q.second) {
			continue
		}
		if q.stranger {
			sugS++
		} else {
			sugK++
			if q.best.Person == q.truth {
				rightK++
			}
		}
	}
	s.setRates(sugK, rightK, sugS)
	return s
}

// setRates fills the shares from the counts of suggestions on named
// people's faces (sugK), the right ones among them (rightK) and
// suggestions on strangers' faces (sugS); Known and Strangers must be set.
func (s *SuggestScore) setRates(sugK, rightK, sugS int) {
	s.Precision = ratio(rightK, sugK)
	s.Coverage = ratio(sugK, s.Known)
	s.CorrectCoverage = ratio(rightK, s.Known)
	s.StrangersSuggested = ratio(sugS, s.Strangers)
	s.PrecisionAll = ratio(rightK, sugK+sugS)
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// meanScores averages the trials' scores (same setting).
func meanScores(ss []SuggestScore) SuggestScore {
	m := ss[0]
	n := float64(len(ss))
	m.Precision, m.Coverage, m.CorrectCoverage, m.StrangersSuggested, m.PrecisionAll = 0, 0, 0, 0, 0
	for _, s := range ss {
		m.Precision += s.Precision / n
		m.Coverage += s.Coverage / n
		m.CorrectCoverage += s.CorrectCoverage / n
		m.StrangersSuggested += s.StrangersSuggested / n
		m.PrecisionAll += s.PrecisionAll / n
	}
	return m
}

// goal is the target with 3 named photos per person.
var goal = struct{ precision, coverage, strangers float64 }{0.98, 0.90, 0.05}

// chooseSuggest picks, over a grid, the setting of largest coverage among
// those meeting the precision and strangers goals; when none meets both,
// the one of largest coverage among those meeting precision with the
// fewest strangers suggested breaking ties (precision first: a wrong name
// costs the user more than a missing one).
func chooseSuggest(trials [][]query) (best SuggestScore, feasible bool) {
	return chooseBy(trials, 10, scoreSuggest)
}

// chooseBy is chooseSuggest for any scoring rule, over margins 0 to
// maxMargin hundredths.
func chooseBy(trials [][]query, maxMargin int, score func([]query, float64, float64) SuggestScore) (best SuggestScore, feasible bool) {
	first := true
	better := func(a, b SuggestScore, fa, fb bool) bool {
		if fa != fb {
			return fa
		}
		if fa {
			return a.Coverage > b.Coverage
		}
		pa, pb := a.Precision >= goal.precision, b.Precision >= goal.precision
		if pa != pb {
			return pa
		}
		if a.StrangersSuggested != b.StrangersSuggested {
			return a.StrangersSuggested < b.StrangersSuggested
		}
		return a.Coverage > b.Coverage
	}
	for di := 30; di <= 65; di++ {
		for mi := 0; mi <= maxMargin; mi++ {
			d, m := float64(di)/100, float64(mi)/100
			ss := make([]SuggestScore, len(trials))
			for i, qs := range trials {
				ss[i] = score(qs, d, m)
			}
			s := meanScores(ss)
			f := s.Precision >= goal.precision && s.StrangersSuggested < goal.strangers
			if first || better(s, best, f, feasible) {
				best, feasible, first = s, f, false
			}
		}
	}
	return best, feasible
}

// suggestTrials runs queries over trials choices of named photos.
func suggestTrials(s *Split, named, trials int, seed uint64) ([][]query, error) {
	out := make([][]query, trials)
	for t := range out {
		q, err := queries(s, named, seed+uint64(t))
		if err != nil {
			return nil, err
		}
		out[t] = q
	}
	return out, nil
}

// SuggestReport is one named-photos protocol on one split at one setting.
type SuggestReport struct {
	Split string `json:"split"`
	Named int    `json:"named_per_person"`
	SuggestScore
	Goal bool `json:"meets_goal,omitempty"`
}

type TuneReport struct {
	// Suggest is the setting chosen on all of the development training
	// identities; CrossValidation holds the two-fold check (chosen on one
	// half of the identities, scored on the other).
	Suggest  SuggestScore `json:"suggest"`
	Feasible bool         `json:"meets_goal_on_train"`
	// KNNVote is the best setting of the rule compared with: a 3-NN
	// majority vote, chosen by the same criterion.
	KNNVote         SuggestScore   `json:"knn_vote"`
	KNNFeasible     bool           `json:"knn_vote_meets_goal_on_train"`
	CrossValidation []SuggestScore `json:"cross_validation"`
	Clusters        []ClusterScore `json:"clusters"`
}

// tune chooses the suggestion setting and the clustering distances
// on the development training identities.
func tune(train *Split, trials int, seed uint64) (*TuneReport, error) {
	r := &TuneReport{}
	all, err := suggestTrials(train, 3, trials, seed)
	if err != nil {
		return nil, err
	}
	r.Suggest, r.Feasible = chooseSuggest(all)
	r.KNNVote, r.KNNFeasible = chooseBy(all, 0, scoreKNN)
	// Two folds over identities (strangers split alike).
	rng := rand.New(rand.NewPCG(seed, 0xf01d))
	half := make([]bool, train.people)
	for p := range half {
		half[p] = rng.IntN(2) == 0
	}
	folds := []*Split{
		train.subset("train-half-a", func(p int) bool { return half[p] }),
		train.subset("train-half-b", func(p int) bool { return !half[p] }),
	}
	for k, f := range folds {
		tr, err := suggestTrials(f, 3, trials, seed)
		if err != nil {
			return nil, err
		}
		chosen, _ := chooseSuggest(tr)
		other, err := suggestTrials(folds[1-k], 3, trials, seed)
		if err != nil {
			return nil, err
		}
		r.CrossValidation = append(r.CrossValidation, meanScoreAt(other, chosen.Distance, chosen.Margin))
	}
	if r.Clusters, err = clusterGrid(train, seed); err != nil {
		return nil, err
	}
	return r, nil
}
