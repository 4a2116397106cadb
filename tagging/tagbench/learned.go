package tagbench

// veil bench tagging --learned-metric: the suggestion and clustering
// figures again after the library learns its metric (issue 15, item 8,
// "the same after learning the metric").
//
// The figures come from a real, throw-away library (tagging.Create in a
// temporary folder, with a cheap key derivation: its secrecy is not what is
// measured) holding the split's faces, one photo per face, and the user's
// decisions are made through the library's own calls, so the metric is
// learned exactly as `veil library learn` and the automatic retraining
// learn it:
//
//  1. The user names the same photos as the plain figures' trial
//     (chooseNamed) with NameFaces.
//  2. The user reviews a random ReviewShare of the library's plain
//     suggestions at the default thresholds: a right one is confirmed
//     (named), a wrong one rejected (RejectFace). A library learns from
//     names and rejections, and without a review one named photo per
//     person gives LMNN no pair of same-person faces to learn from
//     (tagging.ErrTooFewNames). The share is veil bench metric's default
//     (eval.MetricGainOptions.ReviewShare), so the two benches agree.
//  3. LearnMetric with the options given (the command passes
//     tagging.LearnOptions{}, what the library uses): LMNN from the
//     library's secret rotation, and the suggestion distance carried over
//     to the learned space by metric.MatchThreshold.
//  4. The faces neither named nor reviewed are scored, under plain
//     descriptors (SuggestSpace(false)) and under the learned metric
//     (SuggestSpace(true): the carried-over distance and the margin scaled
//     alike), both through SuggestionsIn on the same library state, so the
//     two columns differ only by the metric.
//
// Clustering: every face of the split is clustered (all unnamed, as in the
// plain figures) after mapping by the learned metric, with each
// algorithm's default distance scaled by the same factor as the suggestion
// distance (carried over / plain), the rule SuggestSpace applies to the
// margin. The library itself clusters plain descriptors; this says what
// clustering in the learned space would give.

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/cluster"
)

// ReviewShare is the share of the plain suggestions the simulated user
// reviews before the metric is learned (veil bench metric's default).
const ReviewShare = 0.25

// LearnedReport is one number of named photos per person, averaged
// over the trials.
type LearnedReport struct {
	Split  string `json:"split"`
	Named  int    `json:"named_per_person"`
	Trials int    `json:"trials"`
	// Learned counts the trials in which a metric could be learned (the
	// figures under Learned average those trials only).
	Learned int `json:"learned"`
	// Names, Confirmed and Rejected are the mean numbers of the user's
	// names in the library when learning (named plus confirmed) and of the
	// review's confirmations and rejections.
	Names     float64 `json:"names"`
	Confirmed float64 `json:"confirmed"`
	Rejected  float64 `json:"rejected"`
	// Plain and LearnedScores score the faces neither named nor reviewed,
	// under plain descriptors at the default thresholds and under the
	// learned metric at the carried-over ones (their Distance and Margin).
	Plain         SuggestScore `json:"plain"`
	LearnedScores SuggestScore `json:"learned_metric"`
	// BeforeReview scores the library's plain suggestions before the
	// review on every face not named: the plain protocol's figure for the
	// same trials, through the library (they agree; a check of this path).
	BeforeReview SuggestScore `json:"plain_before_review"`
	// Clusters are BCubed scores of every algorithm on all of the split's
	// faces, plain then learned.
	Clusters []LearnedCluster `json:"clusters"`
	LearnS   float64          `json:"learn_s"`
}

// LearnedCluster is one algorithm's clustering in both spaces.
type LearnedCluster struct {
	Algorithm cluster.Algorithm `json:"algorithm"`
	Plain     ClusterScore      `json:"plain"`
	Learned   ClusterScore      `json:"learned_metric"`
}

// learnedTagging measures the learned metric on split s with named photos
// per person over trials choices of them (seed as the plain figures).
func learnedTagging(ctx context.Context, s *Split, named, trials int, seed uint64, lo tagging.LearnOptions) (*LearnedReport, error) {
	rep := &LearnedReport{Split: s.Name, Named: named, Trials: trials}
	var plain, learned, before []SuggestScore
	// Plain clustering does not depend on the trial.
	plainClusters, err := defaultClusters(s, seed, 1)
	if err != nil {
		return nil, err
	}
	for k, a := range cluster.Algorithms {
		rep.Clusters = append(rep.Clusters, LearnedCluster{Algorithm: a, Plain: plainClusters[k]})
	}
	var clusters [][]ClusterScore // per learned trial, per algorithm
	for t := 0; t < trials; t++ {
		r, err := learnedTrial(ctx, s, named, seed+uint64(t), lo)
		if err != nil {
			return nil, err
		}
		plain = append(plain, r.plain)
		before = append(before, r.before)
		rep.Names += float64(r.names) / float64(trials)
		rep.Confirmed += float64(r.confirmed) / float64(trials)
		rep.Rejected += float64(r.rejected) / float64(trials)
		if r.space.Metric == nil {
			continue
		}
		rep.Learned++
		rep.LearnS += r.learnS
		learned = append(learned, r.learned)
		// The learned space: every face mapped, each algorithm's distance
		// scaled as the suggestion distance was.
		ms := &Split{Name: s.Name, identity: s.identity, stranger: s.stranger, people: s.people, descs: make([][]float32, len(s.descs))}
		for i, d := range s.descs {
			if ms.descs[i], err = r.space.Apply(d); err != nil {
				return nil, err
			}
		}
		scale := r.space.Options.Distance / tagging.SuggestDistance
		cs, err := defaultClusters(ms, seed, scale)
		if err != nil {
			return nil, err
		}
		clusters = append(clusters, cs)
	}
	rep.Plain = meanScores(plain)
	rep.BeforeReview = meanScores(before)
	if rep.Learned > 0 {
		rep.LearnedScores = meanScores(learned)
		rep.LearnS /= float64(rep.Learned)
		for k := range rep.Clusters {
			rep.Clusters[k].Learned = meanClusters(clusters, k)
		}
	}
	return rep, nil
}

// meanClusters averages algorithm k's scores over the trials (the
// number of clusters rounded).
func meanClusters(trials [][]ClusterScore, k int) ClusterScore {
	m := trials[0][k]
	n := float64(len(trials))
	m.Precision, m.Recall, m.F1, m.Distance, m.WallS = 0, 0, 0, 0, 0
	var nc float64
	for _, cs := range trials {
		m.Precision += cs[k].Precision / n
		m.Recall += cs[k].Recall / n
		m.F1 += cs[k].F1 / n
		m.Distance += cs[k].Distance / n
		m.WallS += cs[k].WallS / n
		nc += float64(cs[k].Clusters) / n
	}
	m.Clusters = int(nc + 0.5)
	return m
}

// learnedTrialResult is one trial of learnedTagging.
type learnedTrialResult struct {
	plain, learned, before     SuggestScore
	space                      tagging.Space
	names, confirmed, rejected int
	learnS                     float64
}

// trialLibrary is a throw-away library holding a split's faces, one photo
// per face, and the user's names in it.
type trialLibrary struct {
	lib     *tagging.Library
	s       *Split
	faceIDs []int64       // per row of the split
	row     map[int64]int // face id → row
	truthOf map[int64]int // library person id → split identity
}

// newTrialLibrary creates the library in dir (a cheap key derivation: its
// secrecy is not what is measured) and adds every face of s.
func newTrialLibrary(dir string, s *Split) (*trialLibrary, error) {
	pass := make([]byte, 32)
	if _, err := crand.Read(pass); err != nil {
		return nil, err
	}
	lib, err := tagging.Create(dir, pass, tagging.CreateOptions{KDF: tagging.KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		return nil, err
	}
	t := &trialLibrary{lib: lib, s: s, faceIDs: make([]int64, len(s.descs)), row: make(map[int64]int, len(s.descs)), truthOf: map[int64]int{}}
	for i, d := range s.descs {
		path := fmt.Sprintf("/bench/%d.jpg", i)
		var sum [32]byte
		copy(sum[:], fmt.Sprintf("%032d", i))
		_, ids, err := lib.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sum, Size: 1, Width: 250, Height: 250},
			[]tagging.NewFace{{Box: tagging.Box{X: 70, Y: 70, Width: 110, Height: 110}, Score: 1, Source: tagging.Detected, Descriptor: d}})
		if err != nil {
			lib.Close()
			return nil, err
		}
		t.faceIDs[i] = ids[0]
		t.row[ids[0]] = i
	}
	return t, nil
}

// name names the faces of the rows after their people, as the user would.
func (t *trialLibrary) name(rows []int) error {
	byPerson := map[int][]int64{}
	for _, i := range rows {
		byPerson[t.s.identity[i]] = append(byPerson[t.s.identity[i]], t.faceIDs[i])
	}
	for p, ids := range byPerson {
		person, err := t.lib.NameFaces(ids, fmt.Sprintf("person %d", p))
		if err != nil {
			return err
		}
		t.truthOf[person.ID] = p
	}
	return nil
}

// review plays the user on a random ReviewShare of the suggestions: a
// right one is confirmed (named), a wrong one rejected. It returns the
// rows reviewed and the number rejected.
func (t *trialLibrary) review(sugs []tagging.LibrarySuggestion, trial uint64) (reviewed []bool, confirmed, rejected int, err error) {
	rng := rand.New(rand.NewPCG(trial, 0x4e71e))
	reviewed = make([]bool, len(t.s.descs))
	var confirm []int
	for _, sg := range sugs {
		if rng.Float64() >= ReviewShare {
			continue
		}
		i := t.row[sg.Face]
		reviewed[i] = true
		if p, ok := t.truthOf[sg.Person]; ok && p == t.s.identity[i] {
			confirm = append(confirm, i)
			continue
		}
		if err := t.lib.RejectFace(sg.Face, sg.Name); err != nil {
			return nil, 0, 0, err
		}
		rejected++
	}
	if err := t.name(confirm); err != nil {
		return nil, 0, 0, err
	}
	return reviewed, len(confirm), rejected, nil
}

// score scores the library's suggestions in space sp on the rows that
// skip does not leave out.
func (t *trialLibrary) score(sp tagging.Space, skip func(row int) bool) (SuggestScore, error) {
	sugs, err := t.lib.SuggestionsIn(sp)
	if err != nil {
		return SuggestScore{}, err
	}
	return scoreLibrarySuggestions(t.s, t.faceIDs, skip, t.truthOf, sugs, sp.Options.Distance, sp.Options.Margin), nil
}

// learnedTrial builds the library, plays the user and scores one trial.
func learnedTrial(ctx context.Context, s *Split, named int, trial uint64, lo tagging.LearnOptions) (*learnedTrialResult, error) {
	dir, err := os.MkdirTemp("", "veil-bench-learned-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	t, err := newTrialLibrary(dir, s)
	if err != nil {
		return nil, err
	}
	defer t.lib.Close()
	isNamed, namedIdx := chooseNamed(s, named, trial)
	if err := t.name(namedIdx); err != nil {
		return nil, err
	}
	res := &learnedTrialResult{}
	// The review of the plain suggestions.
	plainSpace, err := t.lib.SuggestSpace(false)
	if err != nil {
		return nil, err
	}
	sugs, err := t.lib.SuggestionsIn(plainSpace)
	if err != nil {
		return nil, err
	}
	res.before = scoreLibrarySuggestions(s, t.faceIDs, func(i int) bool { return isNamed[i] }, t.truthOf, sugs,
		plainSpace.Options.Distance, plainSpace.Options.Margin)
	reviewed, confirmed, rejected, err := t.review(sugs, trial)
	if err != nil {
		return nil, err
	}
	res.confirmed, res.rejected, res.names = confirmed, rejected, len(namedIdx)+confirmed
	unseen := func(i int) bool { return isNamed[i] || reviewed[i] }
	if res.plain, err = t.score(plainSpace, unseen); err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := t.lib.LearnMetric(ctx, lo); errors.Is(err, tagging.ErrTooFewNames) {
		return res, nil
	} else if err != nil {
		return nil, err
	}
	res.learnS = time.Since(start).Seconds()
	if res.space, err = t.lib.SuggestSpace(true); err != nil {
		return nil, err
	}
	if res.space.Metric == nil {
		return nil, errors.New("the library learned a metric but does not suggest with it")
	}
	if res.learned, err = t.score(res.space, unseen); err != nil {
		return nil, err
	}
	return res, nil
}

// scoreLibrarySuggestions scores a library's suggestions on the split's
// faces that skip does not leave out, as scoreSuggest scores queries:
// precision and coverage on named people's faces, the share of strangers'
// faces suggested.
func scoreLibrarySuggestions(s *Split, faceIDs []int64, skip func(row int) bool, truthOf map[int64]int,
	sugs []tagging.LibrarySuggestion, dist, margin float64) SuggestScore {
	got := make(map[int64]int64, len(sugs))
	for _, sg := range sugs {
		got[sg.Face] = sg.Person
	}
	sc := SuggestScore{Distance: dist, Margin: margin}
	var sugK, rightK, sugS int
	for i, id := range faceIDs {
		if skip(i) {
			continue
		}
		stranger := s.stranger[s.identity[i]]
		if stranger {
			sc.Strangers++
		} else {
			sc.Known++
		}
		person, ok := got[id]
		switch {
		case !ok:
		case stranger:
			sugS++
		default:
			sugK++
			if p, known := truthOf[person]; known && p == s.identity[i] {
				rightK++
			}
		}
	}
	sc.setRates(sugK, rightK, sugS)
	return sc
}

// firstPeople keeps the first n named people of s and the strangers in
// the same proportion (n ≤ 0: all).
func firstPeople(s *Split, n int) *Split {
	if n <= 0 {
		return s
	}
	var known, strangers int
	for _, st := range s.stranger {
		if st {
			strangers++
		} else {
			known++
		}
	}
	if n >= known {
		return s
	}
	keepS := strangers * n / known
	var k, st int
	keep := make([]bool, s.people)
	for p := range keep {
		if s.stranger[p] {
			keep[p] = st < keepS
			st++
		} else {
			keep[p] = k < n
			k++
		}
	}
	return s.subset(fmt.Sprintf("%s (first %d people, %d strangers)", s.Name, n, keepS), func(p int) bool { return keep[p] })
}
