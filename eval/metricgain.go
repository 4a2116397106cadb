package eval

// Does a library's learned metric improve suggestions (issue 15, item 6)?
//
// MeasureMetricGain plays a user on a library of LFW-like people: the user
// names k photos of every person, reviews a share of the suggestions made
// with plain descriptors (confirming right ones, which become names, and
// rejecting wrong ones, which become LMNN's negatives), the library learns
// its metric from those names and rejections, and then the remaining
// faces are suggested under plain descriptors and under the learned metric.
// The suggestion rule is the simple one tagging starts from: the person of
// the nearest named face, if within a threshold.
//
// The two metrics have different distance scales, so they are compared at
// matched strangers' false-suggestion rates: for each metric the threshold
// is the one at which a given share of the strangers' faces (people the
// user never named) receive a suggestion, and precision and coverage of the
// named people's other faces are read there. That comparison does not
// depend on how either threshold would be calibrated in production.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/veil-privacy/veil/internal/vec"
	"github.com/veil-privacy/veil/metric"
)

// MetricGainOptions configure MeasureMetricGain. Zero fields take their
// defaults.
type MetricGainOptions struct {
	// Named are the numbers of photos the user names per person (default
	// 1 and 3).
	Named []int
	// ReviewShare is the share of the plain-descriptor suggestions the
	// user reviews before the metric is learned (default 0.25); reviewed
	// faces are not scored.
	ReviewShare float64
	// ReviewThreshold is the plain-descriptor suggestion distance of that
	// review (default 0.45, tagging.SuggestDistance when this was written).
	ReviewThreshold float64
	// StrangerRates are the strangers' false-suggestion rates at which the
	// metrics are compared (default 0.01 and 0.05).
	StrangerRates []float64
	// Seed draws the named photos, the reviewed suggestions and the
	// library's key.
	Seed uint64
	// LMNN configures the metric learning (metric defaults).
	LMNN metric.Options
}

// MetricGainReport is MeasureMetricGain's result.
type MetricGainReport struct {
	People    int                `json:"people"`
	Strangers int                `json:"strangers"`
	Faces     int                `json:"faces"`
	Protocol  string             `json:"protocol"`
	Results   []MetricGainResult `json:"results"`
}

// MetricGainResult is one number of named photos per person.
type MetricGainResult struct {
	NamedPerPerson int `json:"named_per_person"`
	// Named, Confirmed and Rejected count the user's decisions: names
	// given, suggestions confirmed in the review (they become names) and
	// suggestions rejected (LMNN's negatives).
	Named     int `json:"named"`
	Confirmed int `json:"confirmed"`
	Rejected  int `json:"rejected"`
	// Queries are the scored faces of named people, StrangerFaces the
	// scored strangers' faces.
	Queries       int `json:"queries"`
	StrangerFaces int `json:"stranger_faces"`
	// Learned says whether a metric could be learned (it needs some person
	// with two names).
	Learned bool `json:"learned"`
	// NearestCorrect is the forced-choice rate (nearest named face is the
	// right person) of the named people's faces, per metric.
	NearestCorrectPlain   float64 `json:"nearest_correct_plain"`
	NearestCorrectLearned float64 `json:"nearest_correct_learned,omitempty"`
	// At are the comparisons at matched strangers' rates.
	At []MetricGainPoint `json:"at"`
	// PlainAtReviewThreshold scores plain descriptors at the review
	// threshold (the production rule's distance).
	PlainAtReviewThreshold SuggestionScores `json:"plain_at_review_threshold"`
	// LearnedAtCarriedThreshold scores the learned metric at the review
	// threshold carried over to its space by metric.MatchThreshold (as
	// many unnamed faces suggested as under plain descriptors, labels
	// unused: what a library would use).
	LearnedAtCarriedThreshold SuggestionScores `json:"learned_at_carried_threshold,omitzero"`
	// LearnSeconds is the time LMNN took.
	LearnSeconds float64 `json:"learn_s,omitempty"`
}

// MetricGainPoint compares the two metrics where each lets StrangerRate of
// the strangers' faces receive a suggestion.
type MetricGainPoint struct {
	StrangerRate float64          `json:"stranger_rate"`
	Plain        SuggestionScores `json:"plain"`
	Learned      SuggestionScores `json:"learned,omitzero"`
}

// SuggestionScores are a suggestion rule's figures at one threshold.
type SuggestionScores struct {
	Threshold float64 `json:"threshold"`
	// Precision is the share of suggestions for named people's faces that
	// are right; Coverage the share of those faces that get a suggestion
	// (right or wrong); Recall the share that get the right one.
	Precision float64 `json:"precision"`
	Coverage  float64 `json:"coverage"`
	Recall    float64 `json:"recall"`
	// Strangers is the strangers' false-suggestion rate measured.
	Strangers float64 `json:"strangers"`
}

func (o *MetricGainOptions) withDefaults() error {
	if o.Named == nil {
		o.Named = []int{1, 3}
	}
	for _, k := range o.Named {
		if k < 1 {
			return fmt.Errorf("eval: %d named photos per person (at least 1)", k)
		}
	}
	if o.ReviewShare == 0 {
		o.ReviewShare = 0.25
	}
	if !(o.ReviewShare > 0 && o.ReviewShare <= 1) {
		return fmt.Errorf("eval: review share %v outside (0, 1]", o.ReviewShare)
	}
	if o.ReviewThreshold == 0 {
		o.ReviewThreshold = 0.45
	}
	if !(o.ReviewThreshold > 0) || math.IsInf(o.ReviewThreshold, 0) {
		return fmt.Errorf("eval: review threshold %v is not a positive distance", o.ReviewThreshold)
	}
	if o.StrangerRates == nil {
		o.StrangerRates = []float64{0.01, 0.05}
	}
	for _, r := range o.StrangerRates {
		if !(r > 0 && r < 1) {
			return fmt.Errorf("eval: strangers' rate %v outside (0, 1)", r)
		}
	}
	return nil
}

// nearestNamed returns, for each query, the distance to and person of its
// nearest gallery face (person −1 if the gallery is empty).
func nearestNamed(gallery [][]float64, people []int, queries [][]float64) ([]float64, []int) {
	d := make([]float64, len(queries))
	p := make([]int, len(queries))
	for i, q := range queries {
		best, bestD := -1, math.Inf(1)
		for j, g := range gallery {
			if s := vec.SqDist(q, g); s < bestD {
				best, bestD = j, s
			}
		}
		d[i] = math.Sqrt(bestD)
		p[i] = -1
		if best >= 0 {
			p[i] = people[best]
		}
	}
	return d, p
}

// scoresAt computes the suggestion figures at threshold t.
func scoresAt(t float64, qd []float64, qp, truth []int, sd []float64) SuggestionScores {
	s := SuggestionScores{Threshold: t}
	suggested, right := 0, 0
	for i, d := range qd {
		if d <= t {
			suggested++
			if qp[i] == truth[i] {
				right++
			}
		}
	}
	tagged := 0
	for _, d := range sd {
		if d <= t {
			tagged++
		}
	}
	if suggested > 0 {
		s.Precision = float64(right) / float64(suggested)
	}
	if len(qd) > 0 {
		s.Coverage = float64(suggested) / float64(len(qd))
		s.Recall = float64(right) / float64(len(qd))
	}
	if len(sd) > 0 {
		s.Strangers = float64(tagged) / float64(len(sd))
	}
	return s
}

// thresholdForStrangers returns the largest threshold letting at most
// rate of the strangers' nearest distances through.
func thresholdForStrangers(sd []float64, rate float64) float64 {
	s := slices.Clone(sd)
	sort.Float64s(s)
	k := int(math.Floor(rate * float64(len(s)))) // strangers allowed
	if k >= len(s) {
		return s[len(s)-1]
	}
	if k == 0 {
		return s[0] / 2
	}
	return (s[k-1] + s[k]) / 2
}

// MeasureMetricGain runs the protocol in this file's comment on people
// (each with at least max(Named)+1 photos; others are left out) and
// strangers (one photo each is used).
func MeasureMetricGain(ctx context.Context, people, strangers []LinkagePerson, o MetricGainOptions) (*MetricGainReport, error) {
	if err := o.withDefaults(); err != nil {
		return nil, err
	}
	need := slices.Max(o.Named) + 1
	pool := withPhotos(people, need)
	if len(pool) < 2 {
		return nil, fmt.Errorf("eval: only %d people have %d photos or more", len(pool), need)
	}
	if len(strangers) == 0 {
		return nil, errors.New("eval: measuring suggestions needs strangers")
	}
	toF := func(d []float32) []float64 {
		x := make([]float64, len(d))
		for i, v := range d {
			x[i] = float64(v)
		}
		return x
	}
	var strangerX [][]float64
	for _, s := range strangers {
		if len(s.Descriptors) > 0 {
			strangerX = append(strangerX, toF(s.Descriptors[0]))
		}
	}
	rep := &MetricGainReport{People: len(pool), Strangers: len(strangerX),
		Protocol: "the user names k random photos per person, reviews a random share of the plain-descriptor suggestions " +
			"(nearest named face within the review threshold): right ones are confirmed as names, wrong ones rejected; " +
			"LMNN learns from the names and rejections starting from the library's secret rotation; the other faces are " +
			"suggested by nearest named face under plain descriptors and under the learned metric, each at the threshold " +
			"that lets the given share of strangers' faces receive a suggestion"}
	for _, p := range pool {
		rep.Faces += len(p.Descriptors)
	}
	rep.Faces += len(strangerX)
	for _, k := range o.Named {
		r, err := metricGainOne(ctx, pool, strangerX, k, &o, toF)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, *r)
	}
	return rep, nil
}

func metricGainOne(ctx context.Context, pool []LinkagePerson, strangerX [][]float64, k int, o *MetricGainOptions,
	toF func([]float32) []float64) (*MetricGainResult, error) {
	rng := rand.New(rand.NewPCG(o.Seed, uint64(k)))
	res := &MetricGainResult{NamedPerPerson: k}
	// Faces: named gallery, then unnamed faces of named people, then
	// strangers.
	var gx [][]float64
	var gp []int
	var ux [][]float64
	var up []int // true person; −1 for strangers
	for pi, p := range pool {
		order := rng.Perm(len(p.Descriptors))
		for n, i := range order {
			if n < k {
				gx = append(gx, toF(p.Descriptors[i]))
				gp = append(gp, pi)
			} else {
				ux = append(ux, toF(p.Descriptors[i]))
				up = append(up, pi)
			}
		}
	}
	for _, s := range strangerX {
		ux = append(ux, s)
		up = append(up, -1)
	}
	res.Named = len(gx)
	// The review, under plain descriptors.
	d, sp := nearestNamed(gx, gp, ux)
	reviewed := make([]bool, len(ux))
	type rejection struct{ face, person int }
	var rejections []rejection
	var confirmedX [][]float64
	var confirmedP []int
	for i := range ux {
		if d[i] > o.ReviewThreshold || rng.Float64() >= o.ReviewShare {
			continue
		}
		reviewed[i] = true
		if sp[i] == up[i] {
			confirmedX = append(confirmedX, ux[i])
			confirmedP = append(confirmedP, up[i])
		} else {
			rejections = append(rejections, rejection{i, sp[i]})
		}
	}
	res.Confirmed, res.Rejected = len(confirmedX), len(rejections)
	gx = append(gx, confirmedX...)
	gp = append(gp, confirmedP...)
	// What is scored: the faces not reviewed.
	var qx, sx [][]float64
	var qp []int
	for i := range ux {
		if reviewed[i] {
			continue
		}
		if up[i] < 0 {
			sx = append(sx, ux[i])
		} else {
			qx = append(qx, ux[i])
			qp = append(qp, up[i])
		}
	}
	res.Queries, res.StrangerFaces = len(qx), len(sx)
	if len(qx) == 0 || len(sx) == 0 {
		return nil, errors.New("eval: nothing left to score after the review")
	}
	// Plain descriptors.
	pd, pp := nearestNamed(gx, gp, qx)
	psd, _ := nearestNamed(gx, gp, sx)
	res.NearestCorrectPlain = forcedChoice(pp, qp)
	// The learned metric: names (gallery) and the rejected faces, which
	// are unnamed with their rejections.
	data := metric.Data{X: slices.Clone(gx), Labels: slices.Clone(gp)}
	for _, r := range rejections {
		data.Rejections = append(data.Rejections, metric.Rejection{Face: len(data.X), Label: r.person})
		data.X = append(data.X, ux[r.face])
		data.Labels = append(data.Labels, metric.Unnamed)
	}
	var m *metric.Metric
	twoNames := map[int]int{}
	for _, p := range gp {
		twoNames[p]++
	}
	for _, n := range twoNames {
		if n >= 2 {
			res.Learned = true
			break
		}
	}
	if res.Learned {
		rot, err := metric.RandomRotation(linkKey(o.Seed, k, 0), len(gx[0]))
		if err != nil {
			return nil, err
		}
		if od := o.LMNN.OutputDim; od > 0 && od < len(gx[0]) {
			if rot, err = rot.Truncate(od); err != nil {
				return nil, err
			}
		}
		l, err := metric.NewLMNN(o.LMNN)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		start := time.Now()
		if m, _, err = l.Fit(ctx, data, rot); err != nil {
			return nil, fmt.Errorf("eval: learning the library's metric: %w", err)
		}
		res.LearnSeconds = time.Since(start).Seconds()
	}
	var ld, lsd []float64
	var lp []int
	if m != nil {
		tr := func(xs [][]float64) [][]float64 {
			out := make([][]float64, len(xs))
			for i, x := range xs {
				out[i] = m.Transform(nil, x)
			}
			return out
		}
		tg := tr(gx)
		ld, lp = nearestNamed(tg, gp, tr(qx))
		lsd, _ = nearestNamed(tg, gp, tr(sx))
		res.NearestCorrectLearned = forcedChoice(lp, qp)
		t, err := metric.MatchThreshold(m, gx, append(slices.Clone(qx), sx...), o.ReviewThreshold)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		res.LearnedAtCarriedThreshold = scoresAt(t, ld, lp, qp, lsd)
	}
	res.PlainAtReviewThreshold = scoresAt(o.ReviewThreshold, pd, pp, qp, psd)
	for _, rate := range o.StrangerRates {
		pt := MetricGainPoint{StrangerRate: rate, Plain: scoresAt(thresholdForStrangers(psd, rate), pd, pp, qp, psd)}
		if m != nil {
			pt.Learned = scoresAt(thresholdForStrangers(lsd, rate), ld, lp, qp, lsd)
		}
		res.At = append(res.At, pt)
	}
	return res, nil
}

func forcedChoice(got, truth []int) float64 {
	right := 0
	for i := range got {
		if got[i] == truth[i] {
			right++
		}
	}
	return float64(right) / float64(len(got))
}
