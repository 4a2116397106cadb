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
			m := clusters[0][k]
			n := float64(len(clusters))
			m.Precision, m.Recall, m.F1, m.Distance, m.WallS = 0, 0, 0, 0, 0
			var nc float64
			for _, cs := range clusters {
				m.Precision += cs[k].Precision / n
				m.Recall += cs[k].Recall / n
				m.F1 += cs[k].F1 / n
				m.Distance += cs[k].Distance / n
				m.WallS += cs[k].WallS / n
				nc += float64(cs[k].Clusters) / n
			}
			m.Clusters = int(nc + 0.5)
			rep.Clusters[k].Learned = m
		}
	}
	return rep, nil
}

// learnedTrialResult is one trial of learnedTagging.
type learnedTrialResult struct {
	plain, learned, before     SuggestScore
	space                      tagging.Space
	names, confirmed, rejected int
	learnS                     float64
}

// learnedTrial builds the library, plays the user and scores one trial.
func learnedTrial(ctx context.Context, s *Split, named int, trial uint64, lo tagging.LearnOptions) (*learnedTrialResult, error) {
	dir, err := os.MkdirTemp("", "veil-bench-learned-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pass := make([]byte, 32)
	if _, err := crand.Read(pass); err != nil {
		return nil, err
	}
	lib, err := tagging.Create(dir, pass, tagging.CreateOptions{KDF: tagging.KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		return nil, err
	}
	defer lib.Close()
	faceIDs := make([]int64, len(s.descs))
	for i, d := range s.descs {
		path := fmt.Sprintf("/bench/%d.jpg", i)
		var sum [32]byte
		copy(sum[:], fmt.Sprintf("%032d", i))
		_, ids, err := lib.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sum, Size: 1, Width: 250, Height: 250},
			[]tagging.NewFace{{Box: tagging.Box{X: 70, Y: 70, Width: 110, Height: 110}, Score: 1, Source: tagging.Detected, Descriptor: d}})
		if err != nil {
			return nil, err
		}
		faceIDs[i] = ids[0]
	}
	row := make(map[int64]int, len(faceIDs))
	for i, id := range faceIDs {
		row[id] = i
	}
	personName := func(p int) string { return fmt.Sprintf("person %d", p) }
	truthOf := map[int64]int{} // library person id → split identity
	name := func(rows []int) error {
		byPerson := map[int][]int64{}
		for _, i := range rows {
			byPerson[s.identity[i]] = append(byPerson[s.identity[i]], faceIDs[i])
		}
		for p, ids := range byPerson {
			person, err := lib.NameFaces(ids, personName(p))
			if err != nil {
				return err
			}
			truthOf[person.ID] = p
		}
		return nil
	}
	isNamed, namedIdx := chooseNamed(s, named, trial)
	if err := name(namedIdx); err != nil {
		return nil, err
	}
	res := &learnedTrialResult{}
	// The review of the plain suggestions.
	plainSpace, err := lib.SuggestSpace(false)
	if err != nil {
		return nil, err
	}
	sugs, err := lib.SuggestionsIn(plainSpace)
	if err != nil {
		return nil, err
	}
	res.before = scoreLibrarySuggestions(s, faceIDs, func(i int) bool { return isNamed[i] }, truthOf, sugs,
		plainSpace.Options.Distance, plainSpace.Options.Margin)
	rng := rand.New(rand.NewPCG(trial, 0x4e71e))
	reviewed := make([]bool, len(s.descs))
	var confirm []int
	for _, sg := range sugs {
		if rng.Float64() >= ReviewShare {
			continue
		}
		i := row[sg.Face]
		reviewed[i] = true
		if p, ok := truthOf[sg.Person]; ok && p == s.identity[i] {
			confirm = append(confirm, i)
			continue
		}
		if err := lib.RejectFace(sg.Face, sg.Name); err != nil {
			return nil, err
		}
		res.rejected++
	}
	if err := name(confirm); err != nil {
		return nil, err
	}
	res.confirmed = len(confirm)
	res.names = len(namedIdx) + len(confirm)
	score := func(sp tagging.Space) (SuggestScore, error) {
		sugs, err := lib.SuggestionsIn(sp)
		if err != nil {
			return SuggestScore{}, err
		}
		return scoreLibrarySuggestions(s, faceIDs, func(i int) bool { return isNamed[i] || reviewed[i] }, truthOf, sugs,
			sp.Options.Distance, sp.Options.Margin), nil
	}
	if res.plain, err = score(plainSpace); err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := lib.LearnMetric(ctx, lo); errors.Is(err, tagging.ErrTooFewNames) {
		return res, nil
	} else if err != nil {
		return nil, err
	}
	res.learnS = time.Since(start).Seconds()
	if res.space, err = lib.SuggestSpace(true); err != nil {
		return nil, err
	}
	if res.space.Metric == nil {
		return nil, errors.New("the library learned a metric but does not suggest with it")
	}
	if res.learned, err = score(res.space); err != nil {
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
