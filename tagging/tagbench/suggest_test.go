package tagbench

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/tagging/match"
)

func TestScoreSuggest(t *testing.T) {
	pd := func(p int64, d float64) match.PersonDistance { return match.PersonDistance{Person: p, Distance: d} }
	qs := []query{
		{truth: 1, best: pd(1, 0.30), second: pd(2, 0.60)}, // right
		{truth: 1, best: pd(2, 0.40), second: pd(1, 0.70)}, // wrong person
		{truth: 2, best: pd(2, 0.45), second: pd(3, 0.47)}, // within the margin: abstains at 0.05
		{truth: 3, best: pd(3, 0.55), second: pd(1, 0.90)}, // too far at 0.5
		{stranger: true, best: pd(1, 0.35), second: pd(2, 0.80)},
		{stranger: true, best: pd(1, 0.70), second: pd(2, 0.80)},
	}
	s := scoreSuggest(qs, 0.5, 0.05)
	// Known faces 4: suggested 2 (1 right); strangers 2: 1 suggested.
	want := SuggestScore{Distance: 0.5, Margin: 0.05, Precision: 0.5, Coverage: 0.5, CorrectCoverage: 0.25,
		StrangersSuggested: 0.5, PrecisionAll: 1.0 / 3, Known: 4, Strangers: 2}
	if math.Abs(s.PrecisionAll-want.PrecisionAll) > 1e-12 {
		t.Fatalf("precision over all %v, want %v", s.PrecisionAll, want.PrecisionAll)
	}
	s.PrecisionAll = want.PrecisionAll
	if s != want {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	// Without the margin the third face is suggested (rightly).
	if s := scoreSuggest(qs, 0.5, 0); s.Coverage != 0.75 || math.Abs(s.Precision-2.0/3) > 1e-12 {
		t.Fatalf("margin 0: %+v", s)
	}
}

func TestChooseSuggestMeetsGoal(t *testing.T) {
	pd := func(p int64, d float64) match.PersonDistance { return match.PersonDistance{Person: p, Distance: d} }
	// Right answers up to 0.42; a stranger at 0.44 and a wrong person at
	// 0.48: every distance from 0.42 to 0.43 covers all right answers and
	// no stranger, and the smaller wins the tie (margins change nothing
	// here: second people are far).
	var qs []query
	for i := 0; i < 100; i++ {
		qs = append(qs, query{truth: 1, best: pd(1, 0.30+0.12*float64(i)/99), second: pd(2, 0.95)})
	}
	for i := 0; i < 30; i++ {
		qs = append(qs, query{stranger: true, best: pd(1, 0.44), second: pd(2, 0.95)})
	}
	qs = append(qs, query{truth: 1, best: pd(2, 0.48), second: pd(1, 0.95)})
	best, ok := chooseSuggest([][]query{qs})
	if !ok || best.Distance != 0.42 || best.Coverage < 0.99 || best.StrangersSuggested != 0 {
		t.Fatalf("chose %+v (goal met %v)", best, ok)
	}
}

func TestScoreKNN(t *testing.T) {
	pd := func(p int64, d float64) match.PersonDistance { return match.PersonDistance{Person: p, Distance: d} }
	qs := []query{
		{truth: 1, knn: [3]match.PersonDistance{pd(2, 0.30), pd(1, 0.35), pd(1, 0.40)}}, // majority 1 at 0.35: right
		{truth: 1, knn: [3]match.PersonDistance{pd(1, 0.30), pd(2, 0.35), pd(3, 0.40)}}, // no majority: abstain
		{truth: 2, knn: [3]match.PersonDistance{pd(2, 0.55), pd(2, 0.56), pd(1, 0.6)}},  // majority but too far
		{stranger: true, knn: [3]match.PersonDistance{pd(3, 0.2), pd(3, 0.3), pd(1, 0.4)}},
	}
	s := scoreKNN(qs, 0.5, 0)
	if s.Known != 3 || s.Coverage != 1.0/3 || s.Precision != 1 || s.StrangersSuggested != 1 {
		t.Fatalf("%+v", s)
	}
}
