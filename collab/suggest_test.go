package collab

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/tagging/match"
)

func pd(p int64, d float64) match.PersonDistance { return match.PersonDistance{Person: p, Distance: d} }

// TestCountAppliesTheLibrarysRule against hand-counted outcomes.
func TestCountAppliesTheLibrarysRule(t *testing.T) {
	qs := []query{
		{truth: 1, best: pd(1, 0.30), second: pd(2, 0.60)}, // right
		{truth: 1, best: pd(2, 0.40), second: pd(1, 0.70)}, // wrong person
		{truth: 2, best: pd(2, 0.45), second: pd(3, 0.47)}, // within the margin: abstains at 0.05
		{truth: 3, best: pd(3, 0.55), second: pd(1, 0.90)}, // too far at 0.5
		{stranger: true, best: pd(1, 0.35), second: pd(2, 0.80)},
		{stranger: true, best: pd(1, 0.70), second: pd(2, 0.80)},
	}
	var c Counts
	c.count(qs, 0.5, 0.05)
	if want := (Counts{Known: 4, Strangers: 2, Suggested: 2, Right: 1, StrangersSuggested: 1}); c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	s := c.score(0.5, 0.05)
	if s.Precision != 0.5 || s.Coverage != 0.5 || s.StrangersRate != 0.5 {
		t.Fatalf("score %+v", s)
	}
}

// TestChooseMeetsTheGoal: right answers up to 0.42, a stranger at 0.44 and
// a wrong person at 0.48: the chosen distance covers the right answers and
// stops before the stranger; with scale 2 the same in doubled units.
func TestChooseMeetsTheGoal(t *testing.T) {
	for _, scale := range []float64{1, 2} {
		var qs []query
		for i := range 60 {
			qs = append(qs, query{truth: 1, best: pd(1, scale*(0.30+0.002*float64(i))), second: pd(2, math.Inf(1))})
		}
		qs = append(qs, query{stranger: true, best: pd(1, scale*0.44), second: pd(2, math.Inf(1))},
			query{truth: 2, best: pd(1, scale*0.48), second: pd(2, math.Inf(1))})
		s := choose([][]query{qs}, scale, LibraryGoal, 30)
		if s.Coverage != 60.0/61 || s.Precision != 1 || s.StrangersRate != 0 {
			t.Fatalf("scale %g: chose %+v", scale, s)
		}
		if !(s.Distance >= scale*0.418 && s.Distance < scale*0.44) {
			t.Fatalf("scale %g: distance %g", scale, s.Distance)
		}
	}
}
