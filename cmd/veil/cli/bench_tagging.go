package cli

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/internal/progress"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/cluster"
	"github.com/veil-privacy/veil/tagging/match"
)

// tagSplit is one LFW identity list laid out as a user's library: the
// people with at least tagMinImages photos (whom the user names) and the
// people with a single photo (strangers, never named). Each LFW image is a
// photo with one face, its central face.
type tagSplit struct {
	Name     string
	descs    [][]float32
	identity []int  // per face: index of its person
	stranger []bool // per person
	people   int
}

// tagMinImages is the "at least 5 images" for a named person.
const tagMinImages = 5

// loadTagSplit describes the split's photos through the descriptor cache
// that veil verify and veil train fill.
func loadTagSplit(e *env, h *headFlags, lfwDir, file string) (*tagSplit, error) {
	lfw := dataset.LFW{Dir: lfwDir}
	people, err := lfw.People(file)
	if err != nil {
		return nil, err
	}
	s := &tagSplit{Name: file}
	var paths []string
	var ident []int
	for _, p := range people {
		if p.Images != 1 && p.Images < tagMinImages {
			continue
		}
		s.stranger = append(s.stranger, p.Images == 1)
		for i := 1; i <= p.Images; i++ {
			paths = append(paths, lfw.ImagePath(p.Name, i))
			ident = append(ident, s.people)
		}
		s.people++
	}
	desc, err := h.openDescriber()
	if err != nil {
		return nil, err
	}
	bar := progress.New(e.stderr, "describing "+file, len(paths), h.quiet)
	got, err := eval.DescribeAll(paths, engine.Parallelism(), desc, func() { bar.Add(1) })
	bar.Done()
	if err != nil {
		return nil, err
	}
	s.descs = make([][]float32, len(paths))
	for i, p := range paths {
		s.descs[i] = got[p].Descriptor
	}
	s.identity = ident
	return s, nil
}

// subset keeps the people for whom keep is true.
func (s *tagSplit) subset(name string, keep func(person int) bool) *tagSplit {
	out := &tagSplit{Name: name}
	remap := map[int]int{}
	for p := 0; p < s.people; p++ {
		if keep(p) {
			remap[p] = out.people
			out.stranger = append(out.stranger, s.stranger[p])
			out.people++
		}
	}
	for i, p := range s.identity {
		if q, ok := remap[p]; ok {
			out.descs = append(out.descs, s.descs[i])
			out.identity = append(out.identity, q)
		}
	}
	return out
}

// tagQuery is one unnamed face's two nearest people.
type tagQuery struct {
	stranger     bool
	truth        int64
	best, second match.PersonDistance
	// knn are the three nearest named faces' people, nearest first (for
	// the k-NN vote the suggestion rule was compared with).
	knn [3]match.PersonDistance
}

// tagQueries names `named` random photos of every non-stranger person
// (trial chooses which) and returns every other face's two nearest people.
func tagQueries(s *tagSplit, named int, trial uint64) ([]tagQuery, error) {
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
	var out []tagQuery
	for i, d := range s.descs {
		if isNamed[i] {
			continue
		}
		p := s.identity[i]
		b, sec := g.Nearest(d, nil)
		q := tagQuery{stranger: s.stranger[p], truth: int64(p) + 1, best: b, second: sec}
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
func chooseNamed(s *tagSplit, named int, trial uint64) (isNamed []bool, namedIdx []int) {
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

// tagSuggestScore is the suggestion protocol's outcome at one setting.
type tagSuggestScore struct {
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
func scoreKNN(qs []tagQuery, dist, _ float64) tagSuggestScore {
	conv := make([]tagQuery, len(qs))
	for i, q := range qs {
		c := tagQuery{stranger: q.stranger, truth: q.truth}
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
func scoreSuggest(qs []tagQuery, dist, margin float64) tagSuggestScore {
	s := tagSuggestScore{Distance: dist, Margin: margin}
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
func (s *tagSuggestScore) setRates(sugK, rightK, sugS int) {
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
func meanScores(ss []tagSuggestScore) tagSuggestScore {
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

// tagGoal is the target with 3 named photos per person.
var tagGoal = struct{ precision, coverage, strangers float64 }{0.98, 0.90, 0.05}

// chooseSuggest picks, over a grid, the setting of largest coverage among
// those meeting the precision and strangers goals; when none meets both,
// the one of largest coverage among those meeting precision with the
// fewest strangers suggested breaking ties (precision first: a wrong name
// costs the user more than a missing one).
func chooseSuggest(trials [][]tagQuery) (best tagSuggestScore, feasible bool) {
	return chooseBy(trials, 10, scoreSuggest)
}

// chooseBy is chooseSuggest for any scoring rule, over margins 0 to
// maxMargin hundredths.
func chooseBy(trials [][]tagQuery, maxMargin int, score func([]tagQuery, float64, float64) tagSuggestScore) (best tagSuggestScore, feasible bool) {
	first := true
	better := func(a, b tagSuggestScore, fa, fb bool) bool {
		if fa != fb {
			return fa
		}
		if fa {
			return a.Coverage > b.Coverage
		}
		pa, pb := a.Precision >= tagGoal.precision, b.Precision >= tagGoal.precision
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
			ss := make([]tagSuggestScore, len(trials))
			for i, qs := range trials {
				ss[i] = score(qs, d, m)
			}
			s := meanScores(ss)
			f := s.Precision >= tagGoal.precision && s.StrangersSuggested < tagGoal.strangers
			if first || better(s, best, f, feasible) {
				best, feasible, first = s, f, false
			}
		}
	}
	return best, feasible
}

// suggestTrials runs tagQueries over trials choices of named photos.
func suggestTrials(s *tagSplit, named, trials int, seed uint64) ([][]tagQuery, error) {
	out := make([][]tagQuery, trials)
	for t := range out {
		q, err := tagQueries(s, named, seed+uint64(t))
		if err != nil {
			return nil, err
		}
		out[t] = q
	}
	return out, nil
}

// tagClusterScore is one clustering setting's BCubed scores.
type tagClusterScore struct {
	Algorithm cluster.Algorithm `json:"algorithm"`
	Distance  float64           `json:"distance"`
	MinPoints int               `json:"min_points,omitempty"`
	Clusters  int               `json:"clusters"`
	eval.BCubed
	WallS float64 `json:"wall_s"`
}

// clusterGrid scores every algorithm over a grid of distances on the
// split's faces (all unnamed), and returns each algorithm's best F1.
func clusterGrid(s *tagSplit, seed uint64) ([]tagClusterScore, error) {
	const maxD = 0.7
	var out []tagClusterScore
	start := time.Now()
	g, err := cluster.NewNeighbourGraph(s.descs, maxD)
	if err != nil {
		return nil, err
	}
	graphS := time.Since(start).Seconds()
	score := func(o cluster.Options, labels []int, wall float64) (tagClusterScore, error) {
		b, err := eval.BCubedScores(labels, s.identity)
		n := 0
		for _, l := range labels {
			n = max(n, l+1)
		}
		return tagClusterScore{Algorithm: o.Algorithm, Distance: math.Round(o.Distance*1000) / 1000, MinPoints: o.MinPoints, Clusters: n, BCubed: b, WallS: wall}, err
	}
	keep := func(best *tagClusterScore, c tagClusterScore) {
		if c.F1 > best.F1 {
			*best = c
		}
	}
	for _, a := range []cluster.Algorithm{cluster.ChineseWhispers, cluster.DBSCAN} {
		var best tagClusterScore
		for _, mp := range []int{1, 2, 3} {
			if a == cluster.ChineseWhispers && mp > 1 {
				break
			}
			for d := 0.30; d <= maxD+1e-9; d += 0.025 {
				o := cluster.Options{Algorithm: a, Distance: d, MinPoints: mp, Iterations: 100, Seed: seed}
				if a == cluster.ChineseWhispers {
					o.MinPoints = 0
				}
				t0 := time.Now()
				l, err := g.Cluster(o)
				if err != nil {
					return nil, err
				}
				c, err := score(o, l, time.Since(t0).Seconds()+graphS)
				if err != nil {
					return nil, err
				}
				keep(&best, c)
			}
		}
		out = append(out, best)
	}
	for _, a := range []cluster.Algorithm{cluster.AverageLinkage, cluster.CompleteLinkage} {
		t0 := time.Now()
		den, err := cluster.NewDendrogram(s.descs, a)
		if err != nil {
			return nil, err
		}
		wall := time.Since(t0).Seconds()
		var best tagClusterScore
		for d := 0.30; d <= 1.0+1e-9; d += 0.025 {
			c, err := score(cluster.Options{Algorithm: a, Distance: d}, den.Cut(d), wall)
			if err != nil {
				return nil, err
			}
			keep(&best, c)
		}
		out = append(out, best)
	}
	return out, nil
}

// clusterAt scores one setting on a split.
func clusterAt(s *tagSplit, o cluster.Options) (tagClusterScore, error) {
	t0 := time.Now()
	l, err := cluster.Faces(s.descs, o)
	if err != nil {
		return tagClusterScore{}, err
	}
	wall := time.Since(t0).Seconds()
	b, err := eval.BCubedScores(l, s.identity)
	n := 0
	for _, x := range l {
		n = max(n, x+1)
	}
	return tagClusterScore{Algorithm: o.Algorithm, Distance: o.Distance, MinPoints: o.MinPoints, Clusters: n, BCubed: b, WallS: wall}, err
}

// tagIncremental clusters a random share of the split's faces at once and
// joins the rest incrementally, as photos added later would be.
type tagIncremental struct {
	Algorithm   cluster.Algorithm `json:"algorithm"`
	LaterShare  float64           `json:"later_share"`
	Batch       eval.BCubed       `json:"batch"`
	Incremental eval.BCubed       `json:"incremental"`
}

func incrementalAt(s *tagSplit, o cluster.Options, later float64, seed uint64) (tagIncremental, error) {
	rng := rand.New(rand.NewPCG(seed, 0x1c))
	perm := rng.Perm(len(s.descs))
	cut := int(float64(len(perm)) * (1 - later))
	var first, rest [][]float32
	var truth []int
	for _, i := range perm[:cut] {
		first = append(first, s.descs[i])
		truth = append(truth, s.identity[i])
	}
	for _, i := range perm[cut:] {
		rest = append(rest, s.descs[i])
		truth = append(truth, s.identity[i])
	}
	l1, err := cluster.Faces(first, o)
	if err != nil {
		return tagIncremental{}, err
	}
	l2, err := cluster.Join(first, l1, rest, o)
	if err != nil {
		return tagIncremental{}, err
	}
	inc, err := eval.BCubedScores(append(l1, l2...), truth)
	if err != nil {
		return tagIncremental{}, err
	}
	all := append(append([][]float32{}, first...), rest...)
	lb, err := cluster.Faces(all, o)
	if err != nil {
		return tagIncremental{}, err
	}
	batch, err := eval.BCubedScores(lb, truth)
	return tagIncremental{Algorithm: o.Algorithm, LaterShare: later, Batch: batch, Incremental: inc}, err
}

// tagLatency is the time of one suggestion query against a gallery.
type tagLatency struct {
	Faces  int `json:"faces"`
	People int `json:"people"`
	// CPUMsPerQuery is the CPU time of one query (one goroutine, so one
	// core), which a busy shared machine distorts less than wall time.
	CPUMsPerQuery float64 `json:"cpu_ms_per_query"`
	// WallMsPerQuery is the best wall time per query over five rounds.
	WallMsPerQuery float64 `json:"wall_ms_per_query"`
	// BudgetRatio is CPUMsPerQuery / 20 ms (the budget at 100k).
	BudgetRatio float64 `json:"budget_ratio"`
}

// latencyAt times Nearest on one goroutine over a synthetic gallery of
// random unit descriptors, ten faces per person.
func latencyAt(n int, seed uint64) (tagLatency, error) {
	const dim = 128
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	unit := func() []float32 {
		v := make([]float32, dim)
		var s float64
		for i := range v {
			x := rng.NormFloat64()
			v[i] = float32(x)
			s += x * x
		}
		for i := range v {
			v[i] /= float32(math.Sqrt(s))
		}
		return v
	}
	g, err := match.NewGallery(dim)
	if err != nil {
		return tagLatency{}, err
	}
	for i := 0; i < n; i++ {
		if err := g.Add(int64(i+1), int64(i+1), int64(i/10+1), unit()); err != nil {
			return tagLatency{}, err
		}
	}
	queries := max(16, 2_000_000/n)
	qs := make([][]float32, queries)
	for i := range qs {
		qs[i] = unit()
	}
	var best, cpu time.Duration
	var sink float64
	for rep := 0; rep < 5; rep++ {
		c0, t0 := processCPU(), time.Now()
		for _, q := range qs {
			b, _ := g.Nearest(q, nil)
			sink += b.Distance
		}
		d, c := time.Since(t0), processCPU()-c0
		if rep == 0 || d < best {
			best = d
		}
		if rep == 0 || c < cpu {
			cpu = c
		}
	}
	_ = sink
	per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(len(qs)) }
	return tagLatency{Faces: n, People: (n + 9) / 10, CPUMsPerQuery: per(cpu), WallMsPerQuery: per(best), BudgetRatio: per(cpu) / 20}, nil
}

// tagSuggestReport is one named-photos protocol on one split at one setting.
type tagSuggestReport struct {
	Split string `json:"split"`
	Named int    `json:"named_per_person"`
	tagSuggestScore
	Goal bool `json:"meets_goal,omitempty"`
}

type tagTuneReport struct {
	// Suggest is the setting chosen on all of the development training
	// identities; CrossValidation holds the two-fold check (chosen on one
	// half of the identities, scored on the other).
	Suggest  tagSuggestScore `json:"suggest"`
	Feasible bool            `json:"meets_goal_on_train"`
	// KNNVote is the best setting of the rule compared with: a 3-NN
	// majority vote, chosen by the same criterion.
	KNNVote         tagSuggestScore   `json:"knn_vote"`
	KNNFeasible     bool              `json:"knn_vote_meets_goal_on_train"`
	CrossValidation []tagSuggestScore `json:"cross_validation"`
	Clusters        []tagClusterScore `json:"clusters"`
}

type benchTaggingResult struct {
	Trials      int                `json:"trials"`
	Tune        *tagTuneReport     `json:"tune,omitempty"`
	Suggest     []tagSuggestReport `json:"suggest"`
	Clusters    []tagClusterScore  `json:"clusters"`
	Incremental tagIncremental     `json:"incremental"`
	Latency     []tagLatency       `json:"latency"`
	// Indexing is veil library add's end-to-end rate on every core
	// (tagging.MeasureIndexing) over --index-photos LFW photos.
	Indexing *tagging.Throughput `json:"indexing,omitempty"`
	// LearnedMetric holds the figures after the library learns its metric
	// (--learned-metric; bench_tagging_learned.go).
	LearnedMetric []*tagLearnedReport `json:"learned_metric,omitempty"`
	Defaults      map[string]float64  `json:"defaults"`
	WallS         float64             `json:"wall_s"`
}

func newBenchTaggingCmd(e *env) *cobra.Command {
	var data string
	var h headFlags
	var asJSON, tune, learned bool
	var trials, indexPhotos, learnedTrials, learnedPeople int
	var seed uint64
	cmd := &cobra.Command{
		Use:   "tagging",
		Short: "Suggestion precision, coverage and strangers, clustering quality and suggestion latency on LFW",
		Long: `Measures tagging as a user would meet it. A library is made of LFW's
development identities with at least 5 photos, plus every person with a
single photo as a stranger (never named). The user names 1, then 3 random
photos of every non-stranger; veil then suggests a person for each other
face at the default thresholds (tagging/thresholds.go). Reported: precision
of the suggestions on named people's faces, coverage (share of those faces
that get a suggestion), the share of strangers' faces that get one (all
wrong), clustering quality (BCubed) of each algorithm, and the latency of
one suggestion query on one core for 1,000, 10,000 and 100,000 faces
(synthetic descriptors).

Figures are given for the development training identities (where the
thresholds were chosen) and the development test identities (never used to
choose anything). --tune reruns the choice on the training identities: a
grid of distance and margin maximising coverage subject to ≥98% precision and
<5% strangers suggested with 3 named photos (two-fold cross-validation over
identities shows how well the choice carries), and each clustering
algorithm's best-F1 distance.

--learned-metric adds the same figures after the library learns its metric,
on the development test identities: a throw-away library holds their faces,
the user names the photos of the plain figures' first --learned-trials
choices, reviews a quarter of the plain suggestions (confirming right ones,
rejecting wrong ones), and the library learns its LMNN metric as veil
library learn does; the faces neither named nor reviewed are then suggested
under plain descriptors and under the metric at its carried-over distance,
and every face is clustered in the learned space. Each trial is one LMNN fit
(minutes); --learned-max-people measures on fewer people.

Descriptors come through the descriptor cache veil verify and veil train
fill (same pipeline settings), so a warm cache computes nothing.`,
		Example: `  nice veil bench tagging --tune --json
  nice veil bench tagging --learned-metric --index-photos 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if trials < 1 {
				return fmt.Errorf("--trials must be at least 1")
			}
			if learnedTrials < 1 {
				return fmt.Errorf("--learned-trials must be at least 1")
			}
			if learnedPeople < 0 {
				return fmt.Errorf("--learned-max-people must not be negative")
			}
			start := time.Now()
			lfwDir := data
			if lfwDir == "" {
				lfwDir = filepath.Join(datadir.Default(), "lfw")
			}
			train, err := loadTagSplit(e, &h, lfwDir, "peopleDevTrain.txt")
			if err != nil {
				return err
			}
			test, err := loadTagSplit(e, &h, lfwDir, "peopleDevTest.txt")
			if err != nil {
				return err
			}
			res := benchTaggingResult{Trials: trials, Defaults: map[string]float64{
				"suggest_distance": tagging.SuggestDistance, "suggest_margin": tagging.SuggestMargin,
			}}
			if tune {
				t, err := tuneTagging(train, trials, seed)
				if err != nil {
					return err
				}
				res.Tune = t
			}
			def := tagging.DefaultSuggestOptions()
			for _, s := range []*tagSplit{train, test} {
				for _, named := range []int{1, 3} {
					tr, err := suggestTrials(s, named, trials, seed)
					if err != nil {
						return err
					}
					ss := make([]tagSuggestScore, len(tr))
					for i, q := range tr {
						ss[i] = scoreSuggest(q, def.Distance, def.Margin)
					}
					m := meanScores(ss)
					res.Suggest = append(res.Suggest, tagSuggestReport{Split: s.Name, Named: named, tagSuggestScore: m,
						Goal: named == 3 && m.Precision >= tagGoal.precision && m.Coverage >= tagGoal.coverage && m.StrangersSuggested < tagGoal.strangers})
				}
				for _, a := range cluster.Algorithms {
					o, err := tagging.NewClusterOptions(a)
					if err != nil {
						return err
					}
					o.Seed = seed
					c, err := clusterAt(s, o)
					if err != nil {
						return err
					}
					res.Clusters = append(res.Clusters, c)
				}
			}
			o, err := tagging.NewClusterOptions(tagging.DefaultClusterAlgorithm)
			if err != nil {
				return err
			}
			if res.Incremental, err = incrementalAt(test, o, 0.2, seed); err != nil {
				return err
			}
			for _, n := range []int{1000, 10000, 100000} {
				l, err := latencyAt(n, seed)
				if err != nil {
					return err
				}
				res.Latency = append(res.Latency, l)
			}
			if learned {
				ls := firstPeople(test, learnedPeople)
				for _, named := range []int{1, 3} {
					r, err := learnedTagging(cmd.Context(), ls, named, learnedTrials, seed, tagging.LearnOptions{})
					if err != nil {
						return err
					}
					res.LearnedMetric = append(res.LearnedMetric, r)
				}
			}
			if indexPhotos > 0 {
				if res.Indexing, err = measureTagIndexing(cmd.Context(), e, lfwDir, h.models, indexPhotos); err != nil {
					return err
				}
			}
			res.WallS = time.Since(start).Seconds()
			if asJSON {
				return writeJSON(e.stdout, res)
			}
			return printBenchTagging(e, &res)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&data, "data", "", "LFW folder (default: <data>/lfw)")
	fl.StringVar(&h.models, "models", "", "folder of face-api's weight files (default: $VEIL_MODELS, else models/ of the checkout)")
	fl.StringVar(&h.cache, "cache", "", "descriptor cache folder, shared with veil verify and veil train (default $VEIL_CACHE, else the user's cache folder)")
	fl.BoolVar(&h.noCache, "no-cache", false, "do not read or write the descriptor cache")
	fl.BoolVarP(&h.quiet, "quiet", "q", false, "no progress output")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.BoolVar(&tune, "tune", false, "also choose the thresholds again on the development training identities")
	fl.IntVar(&trials, "trials", 5, "random choices of the named photos averaged per figure")
	fl.IntVar(&indexPhotos, "index-photos", 100, "index this many LFW photos (the first of each person) into a throw-away library to measure indexing throughput on every core (0: skip)")
	fl.BoolVar(&learned, "learned-metric", false, "also measure suggestions and clustering after the library learns its metric, on the development test identities (slow: one LMNN fit per trial and number of named photos)")
	fl.IntVar(&learnedTrials, "learned-trials", 1, "choices of the named photos averaged with --learned-metric (the first ones of --trials)")
	fl.IntVar(&learnedPeople, "learned-max-people", 0, "with --learned-metric, only the first this many named people and the same share of strangers (0: all)")
	fl.Uint64Var(&seed, "seed", 1, "seed of the named photos' choice, the clustering order and the synthetic descriptors")
	// The pipeline settings veil verify and veil train default to, so
	// their cached descriptors are found.
	h.detector, h.align, h.minScore = "tiny", "both", 0.5
	return cmd
}

// tuneTagging chooses the suggestion setting and the clustering distances
// on the development training identities.
func tuneTagging(train *tagSplit, trials int, seed uint64) (*tagTuneReport, error) {
	r := &tagTuneReport{}
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
	folds := []*tagSplit{
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
		ss := make([]tagSuggestScore, len(other))
		for i, q := range other {
			ss[i] = scoreSuggest(q, chosen.Distance, chosen.Margin)
		}
		r.CrossValidation = append(r.CrossValidation, meanScores(ss))
	}
	if r.Clusters, err = clusterGrid(train, seed); err != nil {
		return nil, err
	}
	return r, nil
}

func printBenchTagging(e *env, r *benchTaggingResult) error {
	w := e.stdout
	if r.Tune != nil {
		t := r.Tune
		fmt.Fprintf(w, "tuned on peopleDevTrain.txt (3 named photos): distance %.2f margin %.2f → precision %.2f%%, coverage %.2f%%, strangers %.2f%% (goal met: %v)\n",
			t.Suggest.Distance, t.Suggest.Margin, 100*t.Suggest.Precision, 100*t.Suggest.Coverage, 100*t.Suggest.StrangersSuggested, t.Feasible)
		fmt.Fprintf(w, "  3-NN vote instead: distance %.2f → precision %.2f%%, coverage %.2f%%, strangers %.2f%% (goal met: %v)\n",
			t.KNNVote.Distance, 100*t.KNNVote.Precision, 100*t.KNNVote.Coverage, 100*t.KNNVote.StrangersSuggested, t.KNNFeasible)
		for i, c := range t.CrossValidation {
			fmt.Fprintf(w, "  fold %d (chosen on the other half): distance %.2f margin %.2f → precision %.2f%%, coverage %.2f%%, strangers %.2f%%\n",
				i+1, c.Distance, c.Margin, 100*c.Precision, 100*c.Coverage, 100*c.StrangersSuggested)
		}
		for _, c := range t.Clusters {
			fmt.Fprintf(w, "  %-16s best distance %.3f (min points %d): BCubed P %.3f R %.3f F1 %.3f, %d clusters\n", c.Algorithm, c.Distance, c.MinPoints, c.Precision, c.Recall, c.F1, c.Clusters)
		}
	}
	fmt.Fprintf(w, "suggestions at distance %.2f, margin %.2f (mean of %d choices of the named photos):\n", r.Defaults["suggest_distance"], r.Defaults["suggest_margin"], r.Trials)
	for _, s := range r.Suggest {
		fmt.Fprintf(w, "  %-20s %d named: precision %.2f%%, coverage %.2f%% (right %.2f%%), strangers suggested %.2f%% (%d known, %d strangers' faces)\n",
			s.Split, s.Named, 100*s.Precision, 100*s.Coverage, 100*s.CorrectCoverage, 100*s.StrangersSuggested, s.Known, s.Strangers)
	}
	fmt.Fprintln(w, "clustering (BCubed), training identities first then test:")
	for _, c := range r.Clusters {
		fmt.Fprintf(w, "  %-16s distance %.3f: P %.3f R %.3f F1 %.3f, %d clusters, %.2f s\n", c.Algorithm, c.Distance, c.Precision, c.Recall, c.F1, c.Clusters, c.WallS)
	}
	in := r.Incremental
	fmt.Fprintf(w, "incremental (%s, last %.0f%% joined): F1 %.3f vs %.3f at once\n", in.Algorithm, 100*in.LaterShare, in.Incremental.F1, in.Batch.F1)
	for _, l := range r.Latency {
		fmt.Fprintf(w, "  %6d faces: %.3f ms CPU per query (%.3f of the 20 ms budget), best wall %.3f ms\n", l.Faces, l.CPUMsPerQuery, l.BudgetRatio, l.WallMsPerQuery)
	}
	for _, l := range r.LearnedMetric {
		fmt.Fprintf(w, "after learning the metric (%s, %d named, review confirmed %.0f and rejected %.0f, learned in %d of %d trials, %.0f s per fit):\n",
			l.Split, l.Named, l.Confirmed, l.Rejected, l.Learned, l.Trials, l.LearnS)
		for _, c := range []struct {
			name string
			s    tagSuggestScore
		}{{"plain", l.Plain}, {"learned", l.LearnedScores}, {"before review (plain)", l.BeforeReview}} {
			fmt.Fprintf(w, "  %-22s distance %.3f margin %.3f: precision %.2f%%, coverage %.2f%%, strangers suggested %.2f%%\n",
				c.name, c.s.Distance, c.s.Margin, 100*c.s.Precision, 100*c.s.Coverage, 100*c.s.StrangersSuggested)
		}
		for _, c := range l.Clusters {
			fmt.Fprintf(w, "  %-16s BCubed F1 plain %.3f (P %.3f R %.3f), learned %.3f (P %.3f R %.3f) at distance %.3f\n",
				c.Algorithm, c.Plain.F1, c.Plain.Precision, c.Plain.Recall, c.Learned.F1, c.Learned.Precision, c.Learned.Recall, c.Learned.Distance)
		}
	}
	if r.Indexing != nil {
		fmt.Fprintf(w, "indexing: %.2f photos/s on %d workers (%d photos, %d faces)\n", r.Indexing.PhotosPerSecond, r.Indexing.Workers, r.Indexing.Photos, r.Indexing.Faces)
	}
	fmt.Fprintf(w, "wall time %.1f s\n", r.WallS)
	return nil
}

// measureTagIndexing links the first photo of the first n people of LFW
// into a temporary folder and indexes it into a throw-away library.
func measureTagIndexing(ctx context.Context, e *env, lfwDir, models string, n int) (*tagging.Throughput, error) {
	root := filepath.Join(lfwDir, "images_deepfunneled")
	people, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "veil-bench-tagging-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	k := 0
	for _, p := range people {
		if k == n {
			break
		}
		name := p.Name() + "_0001.jpg"
		if err := os.Symlink(filepath.Join(root, p.Name(), name), filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		k++
	}
	p, err := e.pipeline(tagging.PipelineOptions(models))
	if err != nil {
		return nil, err
	}
	return tagging.MeasureIndexing(ctx, []string{dir}, tagging.IndexOptions{Pipeline: p})
}
