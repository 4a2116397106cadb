package tagbench

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/metric"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/cluster"
	"github.com/veil-privacy/veil/tagging/match"
)

// synthSplit is a tiny split of 128-d descriptors on the pipeline's scale:
// each person a random centre (people ~1.4 apart) plus noise (faces of one
// person ~0.3 apart); photos[p] faces for person p, strangers with one.
func synthSplit(seed uint64, photos []int, strangers int) *Split {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := &Split{Name: "synthetic"}
	add := func(n int, stranger bool) {
		c := make([]float64, 128)
		for i := range c {
			c[i] = 0.09 * rng.NormFloat64()
		}
		for range n {
			d := make([]float32, 128)
			for i := range d {
				d[i] = float32(c[i] + 0.02*rng.NormFloat64())
			}
			s.descs = append(s.descs, d)
			s.identity = append(s.identity, s.people)
		}
		s.stranger = append(s.stranger, stranger)
		s.people++
	}
	for _, n := range photos {
		add(n, false)
	}
	for range strangers {
		add(1, true)
	}
	return s
}

var quickLearnOptions = tagging.LearnOptions{LMNN: metric.Options{Solver: metric.Solver{Iterations: 30, Workers: 1}}}

// The --learned-metric path on a tiny library: a metric is learned from
// the names and the review, suggestions in its space are scored on the
// faces neither named nor reviewed, and every algorithm clusters in both
// spaces.
func TestLearnedTagging(t *testing.T) {
	s := synthSplit(3, []int{6, 6, 6, 6, 6, 6}, 8)
	// One trial with 1 named photo (so the counts below are that trial's),
	// two with 3.
	for named, trials := range map[int]int{1: 1, 3: 2} {
		r, err := learnedTagging(context.Background(), s, named, trials, 1, quickLearnOptions)
		if err != nil {
			t.Fatal(err)
		}
		if r.Named != named || r.Trials != trials || r.Learned != trials {
			t.Fatalf("named %d: %d of %d trials learned", named, r.Learned, r.Trials)
		}
		if want := float64(6*named) + r.Confirmed; r.Names != want {
			t.Fatalf("named %d: %v names, want %v (named plus confirmed)", named, r.Names, want)
		}
		if named == 1 && r.Confirmed == 0 {
			t.Fatalf("named 1: the review confirmed nothing, so nothing could be learned")
		}
		// Every face not named and not reviewed is scored.
		if got, want := float64(r.Plain.Known+r.Plain.Strangers), float64(len(s.descs)-6*named)-r.Confirmed-r.Rejected; trials == 1 && got != want {
			t.Fatalf("named %d: %v faces scored, want %v", named, got, want)
		}
		if r.Plain.Strangers != 8 || r.LearnedScores.Known != r.Plain.Known {
			t.Fatalf("named %d: plain %+v learned %+v", named, r.Plain, r.LearnedScores)
		}
		if r.Plain.Distance != tagging.SuggestDistance || r.LearnedScores.Distance == r.Plain.Distance || !(r.LearnedScores.Distance > 0) {
			t.Fatalf("named %d: distances plain %v learned %v (carried over)", named, r.Plain.Distance, r.LearnedScores.Distance)
		}
		for _, sc := range []SuggestScore{r.Plain, r.LearnedScores} {
			if sc.Precision < 0.99 || sc.Coverage < 0.9 || sc.StrangersSuggested > 0 {
				t.Fatalf("named %d: well separated people scored %+v", named, sc)
			}
		}
		if len(r.Clusters) != len(cluster.Algorithms) {
			t.Fatalf("%d clusterings", len(r.Clusters))
		}
		for _, c := range r.Clusters {
			if c.Plain.F1 < 0.95 || c.Learned.F1 < 0.9 || c.Learned.Algorithm != c.Algorithm || !(c.Learned.Distance > 0) {
				t.Fatalf("named %d: %s clustering plain %+v learned %+v", named, c.Algorithm, c.Plain, c.Learned)
			}
		}
	}
}

// With one photo per named person and nothing else of theirs to confirm,
// a library cannot learn (tagging.ErrTooFewNames): the plain figures are
// reported and no learned ones.
func TestLearnedTaggingTooFewNames(t *testing.T) {
	s := synthSplit(4, []int{1, 1, 1}, 4)
	r, err := learnedTagging(context.Background(), s, 1, 1, 1, quickLearnOptions)
	if err != nil {
		t.Fatal(err)
	}
	if r.Learned != 0 || r.LearnedScores != (SuggestScore{}) || r.Plain.Strangers+int(r.Rejected) != 4 {
		t.Fatalf("%+v", r)
	}
	for _, c := range r.Clusters {
		if c.Learned != (ClusterScore{}) {
			t.Fatalf("learned clustering without a metric: %+v", c)
		}
	}
}

func TestScoreLibrarySuggestions(t *testing.T) {
	// Faces 0–2 of person 0, 3–4 of person 1, 5–6 strangers (people 2, 3);
	// face 0 is skipped (named). Library person ids 10 and 11.
	s := &Split{identity: []int{0, 0, 0, 1, 1, 2, 3}, stranger: []bool{false, false, true, true}, people: 4}
	ids := []int64{100, 101, 102, 103, 104, 105, 106}
	truth := map[int64]int{10: 0, 11: 1}
	sugs := []tagging.LibrarySuggestion{
		{Suggestion: match.Suggestion{Face: 100, Person: 10}}, // skipped
		{Suggestion: match.Suggestion{Face: 101, Person: 10}}, // right
		{Suggestion: match.Suggestion{Face: 102, Person: 11}}, // wrong
		{Suggestion: match.Suggestion{Face: 103, Person: 11}}, // right
		{Suggestion: match.Suggestion{Face: 106, Person: 10}}, // a stranger
	}
	got := scoreLibrarySuggestions(s, ids, func(i int) bool { return i == 0 }, truth, sugs, 0.5, 0.04)
	want := SuggestScore{Distance: 0.5, Margin: 0.04, Precision: 2.0 / 3, Coverage: 3.0 / 4, CorrectCoverage: 2.0 / 4,
		StrangersSuggested: 1.0 / 2, PrecisionAll: 2.0 / 4, Known: 4, Strangers: 2}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestFirstPeople(t *testing.T) {
	s := synthSplit(5, []int{2, 3, 4, 5}, 8)
	f := firstPeople(s, 2)
	if f.people != 2+4 || len(f.descs) != 2+3+4 {
		t.Fatalf("%d people, %d faces", f.people, len(f.descs))
	}
	if firstPeople(s, 0) != s || firstPeople(s, 4) != s {
		t.Fatal("no limit should keep the split")
	}
}

// Before the review, the library's plain suggestions score exactly as the
// plain protocol (queries and scoreSuggest at the defaults) on the same
// choice of named photos: the learned figures are measured on the same
// footing as the plain ones. People close enough that some suggestions
// are wrong or abstain, so the figures are not trivially 1.
func TestLearnedTaggingAgreesWithPlainProtocol(t *testing.T) {
	s := synthSplit(6, []int{5, 6, 7, 5, 6, 8, 5, 5}, 10)
	// Move every person 85% of the way towards the first one (by their
	// first faces), keeping each person's spread.
	first := map[int][]float32{}
	for i, d := range s.descs {
		if _, ok := first[s.identity[i]]; !ok {
			first[s.identity[i]] = append([]float32(nil), d...)
		}
	}
	for i, d := range s.descs {
		if s.stranger[s.identity[i]] {
			continue
		}
		f := first[s.identity[i]]
		for j := range d {
			d[j] += 0.85 * (first[0][j] - f[j])
		}
	}
	def := tagging.DefaultSuggestOptions()
	for _, named := range []int{1, 3} {
		r, err := learnedTagging(context.Background(), s, named, 1, 7, quickLearnOptions)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := queries(s, named, 7)
		if err != nil {
			t.Fatal(err)
		}
		want := scoreSuggest(qs, def.Distance, def.Margin)
		if r.BeforeReview != want {
			t.Fatalf("named %d: library %+v\nprotocol %+v", named, r.BeforeReview, want)
		}
		if want.Coverage == 1 && want.Precision == 1 {
			t.Fatalf("named %d: a trivial case %+v", named, want)
		}
	}
}
