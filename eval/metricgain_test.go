package eval

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/metric"
)

// nuisancePool draws people whose photos vary mostly along a few shared
// nuisance directions (pose, light), more than people differ: the case a
// learned metric is for. Strangers are one photo of further people.
func nuisancePool(rng *rand.Rand, people, photos, strangers, d int) ([]LinkagePerson, []LinkagePerson) {
	const nuisance = 4
	dirs := make([][]float64, nuisance)
	for i := range dirs {
		dirs[i] = make([]float64, d)
		for j := range dirs[i] {
			dirs[i][j] = rng.NormFloat64() / math.Sqrt(float64(d))
		}
	}
	draw := func(n int) LinkagePerson {
		c := make([]float64, d)
		for j := range c {
			c[j] = 0.5 * rng.NormFloat64() / math.Sqrt(float64(d))
		}
		var p LinkagePerson
		for range n {
			v := make([]float32, d)
			for j := range v {
				v[j] = float32(c[j] + 0.05*rng.NormFloat64()/math.Sqrt(float64(d)))
			}
			for _, dir := range dirs {
				a := 0.3 * rng.NormFloat64()
				for j := range v {
					v[j] += float32(a * dir[j])
				}
			}
			p.Descriptors = append(p.Descriptors, v)
		}
		return p
	}
	var ps, ss []LinkagePerson
	for range people {
		ps = append(ps, draw(photos))
	}
	for range strangers {
		ss = append(ss, draw(1))
	}
	return ps, ss
}

// Where shared nuisance directions dominate, the learned metric must
// suggest better than plain descriptors at the same strangers' rate; with
// one name per person it can only learn from the confirmed suggestions.
func TestMetricGainLearnsNuisance(t *testing.T) {
	people, strangers := nuisancePool(rand.New(rand.NewPCG(21, 22)), 40, 8, 80, 24)
	rep, err := MeasureMetricGain(context.Background(), people, strangers, MetricGainOptions{
		ReviewThreshold: 0.6, ReviewShare: 0.5, Seed: 5, LMNN: metric.Options{Solver: metric.Solver{Workers: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.People != 40 || rep.Strangers != 80 || rep.Faces != 40*8+80 || len(rep.Results) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Results {
		t.Logf("k = %d: named %d, confirmed %d, rejected %d, queries %d, strangers %d; forced choice plain %.3f learned %.3f; at %+v",
			r.NamedPerPerson, r.Named, r.Confirmed, r.Rejected, r.Queries, r.StrangerFaces, r.NearestCorrectPlain, r.NearestCorrectLearned, r.At)
		if r.Named != 40*r.NamedPerPerson {
			t.Errorf("k = %d: %d names", r.NamedPerPerson, r.Named)
		}
		if r.Queries+r.StrangerFaces+r.Confirmed+r.Rejected != 40*(8-r.NamedPerPerson)+80 {
			t.Errorf("k = %d: faces not accounted for", r.NamedPerPerson)
		}
		if r.Rejected == 0 || r.Confirmed == 0 {
			t.Errorf("k = %d: the review confirmed %d and rejected %d: the test must exercise both", r.NamedPerPerson, r.Confirmed, r.Rejected)
		}
		if !r.Learned {
			t.Fatalf("k = %d: no metric learned", r.NamedPerPerson)
		}
		if r.NearestCorrectLearned < r.NearestCorrectPlain+0.1 {
			t.Errorf("k = %d: forced choice learned %.3f vs plain %.3f, want a gain of 0.1", r.NamedPerPerson, r.NearestCorrectLearned, r.NearestCorrectPlain)
		}
		// The carried-over distance suggests as many faces as plain
		// descriptors at the review threshold.
		count := func(s SuggestionScores) float64 {
			return s.Coverage*float64(r.Queries) + s.Strangers*float64(r.StrangerFaces)
		}
		if a, b := count(r.PlainAtReviewThreshold), count(r.LearnedAtCarriedThreshold); math.Abs(a-b) > 1.5 {
			t.Errorf("k = %d: %.0f faces suggested under plain descriptors, %.0f at the carried-over distance", r.NamedPerPerson, a, b)
		}
		for _, p := range r.At {
			if math.Abs(p.Plain.Strangers-p.StrangerRate) > 0.02 || math.Abs(p.Learned.Strangers-p.StrangerRate) > 0.02 {
				t.Errorf("k = %d: strangers' rate %.3f / %.3f, asked %.3f", r.NamedPerPerson, p.Plain.Strangers, p.Learned.Strangers, p.StrangerRate)
			}
			if p.Learned.Recall <= p.Plain.Recall {
				t.Errorf("k = %d at strangers %.2f: recall learned %.3f ≤ plain %.3f", r.NamedPerPerson, p.StrangerRate, p.Learned.Recall, p.Plain.Recall)
			}
		}
	}
}

func TestScoresAtAndStrangerThreshold(t *testing.T) {
	sd := []float64{0.1, 0.5, 0.6, 0.9}
	if got := thresholdForStrangers(sd, 0.25); got != 0.3 {
		t.Errorf("threshold %v, want 0.3 (between the first and second stranger)", got)
	}
	if got := thresholdForStrangers(sd, 0.1); got != 0.05 {
		t.Errorf("threshold %v, want 0.05 (no stranger)", got)
	}
	s := scoresAt(0.3, []float64{0.1, 0.2, 0.4, 0.25}, []int{1, 2, 3, 9}, []int{1, 2, 3, 4}, sd)
	want := SuggestionScores{Threshold: 0.3, Precision: 2.0 / 3, Coverage: 0.75, Recall: 0.5, Strangers: 0.25}
	if s != want {
		t.Errorf("scores %+v, want %+v", s, want)
	}
}

func TestMetricGainBadOptions(t *testing.T) {
	people, strangers := nuisancePool(rand.New(rand.NewPCG(1, 2)), 5, 5, 5, 4)
	for _, o := range []MetricGainOptions{
		{Named: []int{0}}, {ReviewShare: 2}, {ReviewThreshold: -1}, {StrangerRates: []float64{1}},
	} {
		if _, err := MeasureMetricGain(context.Background(), people, strangers, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := MeasureMetricGain(context.Background(), people, nil, MetricGainOptions{}); err == nil {
		t.Error("no strangers accepted")
	}
}
