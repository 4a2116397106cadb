package match

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/internal/vec"
)

func unitVec(rng *rand.Rand, dim int) []float32 {
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

func TestNearestMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	const dim = 128
	g, _ := NewGallery(dim)
	var vecs [][]float32
	var people []int64
	for i := 0; i < 503; i++ {
		v := unitVec(rng, dim)
		p := int64(rng.IntN(40)) // 0: unnamed faces, skipped
		vecs, people = append(vecs, v), append(people, p)
		if err := g.Add(int64(i+1), int64(i+1), p, v); err != nil {
			t.Fatal(err)
		}
	}
	for trial := 0; trial < 50; trial++ {
		q := unitVec(rng, dim)
		excluded := int64(rng.IntN(40))
		nearest := map[int64]float64{}
		for i, v := range vecs {
			if people[i] == 0 || people[i] == excluded {
				continue
			}
			d := math.Sqrt(float64(vec.SqDist32(q, v)))
			if old, ok := nearest[people[i]]; !ok || d < old {
				nearest[people[i]] = d
			}
		}
		var ranked []PersonDistance
		for p, d := range nearest {
			ranked = append(ranked, PersonDistance{p, d})
		}
		slices.SortFunc(ranked, func(a, b PersonDistance) int {
			if a.Distance < b.Distance {
				return -1
			}
			return 1
		})
		b, s := g.Nearest(q, func(p int64) bool { return p == excluded })
		if b.Person != ranked[0].Person || s.Person != ranked[1].Person ||
			math.Abs(b.Distance-ranked[0].Distance) > 1e-5 || math.Abs(s.Distance-ranked[1].Distance) > 1e-5 {
			t.Fatalf("got %v %v, want %v %v", b, s, ranked[0], ranked[1])
		}
	}
}

// scene builds a gallery from (face, photo, person, x) rows on a line, so
// distances are plain differences.
func scene(t *testing.T, rows [][4]float64) *Gallery {
	t.Helper()
	g, _ := NewGallery(1)
	for _, r := range rows {
		if err := g.Add(int64(r[0]), int64(r[1]), int64(r[2]), []float32{float32(r[3])}); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func TestSuggestRules(t *testing.T) {
	// Named: person 1 at 0 (photo 100), person 2 at 1 (photo 101),
	// person 3 at 0.35 (photo 102).
	named := scene(t, [][4]float64{{1, 100, 1, 0}, {2, 101, 2, 1}, {3, 102, 3, 0.35}})
	o := SuggestOptions{Distance: 0.3, Margin: 0.05}
	cases := []struct {
		name     string
		unnamed  []Unnamed
		rejected []Rejection
		want     []Suggestion
	}{
		{"within distance", []Unnamed{{10, 200, []float32{0.95}}}, nil,
			[]Suggestion{{10, 2, 0.05}}},
		{"too far from everyone", []Unnamed{{10, 200, []float32{-0.5}}}, nil, nil},
		{"two people about as close: abstain", []Unnamed{{10, 200, []float32{0.17}}}, nil, nil},
		{"clear margin", []Unnamed{{10, 200, []float32{-0.1}}}, nil,
			[]Suggestion{{10, 1, 0.1}}},
		{"rejected person never suggested; next one is", []Unnamed{{10, 200, []float32{0.28}}},
			[]Rejection{{10, 3}}, []Suggestion{{10, 1, 0.28}}},
		{"same face without the rejection", []Unnamed{{10, 200, []float32{0.28}}}, nil,
			[]Suggestion{{10, 3, 0.07}}},
		{"rejection of another face does not apply", []Unnamed{{10, 200, []float32{0.95}}},
			[]Rejection{{11, 2}}, []Suggestion{{10, 2, 0.05}}},
		{"person already named in the same photo excluded", []Unnamed{{10, 101, []float32{0.95}}}, nil, nil},
		{"two faces of one photo: the closer keeps the person",
			[]Unnamed{{10, 200, []float32{0.9}}, {11, 200, []float32{0.98}}, {12, 201, []float32{0.9}}}, nil,
			[]Suggestion{{11, 2, 0.02}, {12, 2, 0.1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Suggest(named, c.unnamed, c.rejected, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i].Face != c.want[i].Face || got[i].Person != c.want[i].Person || math.Abs(got[i].Distance-c.want[i].Distance) > 1e-6 {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestSuggestBadInput(t *testing.T) {
	g := scene(t, [][4]float64{{1, 1, 1, 0}})
	if _, err := Suggest(g, []Unnamed{{2, 2, []float32{0, 0}}}, nil, SuggestOptions{Distance: 0.5, Margin: 0.04}); err == nil {
		t.Error("descriptor of the wrong length accepted")
	}
	for _, o := range []SuggestOptions{{Distance: 0}, {Distance: 0.5, Margin: -1}, {Distance: math.NaN()}} {
		if _, err := Suggest(g, nil, nil, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if err := g.Add(5, 5, 1, []float32{float32(math.NaN())}); err == nil {
		t.Error("NaN descriptor accepted")
	}
}

func TestReviewQueue(t *testing.T) {
	sugs := []Suggestion{
		{1, 7, 0.30}, {2, 7, 0.20}, {3, 7, 0.25}, // cluster 0, person 7: one question of three
		{4, 8, 0.10}, {5, 8, 0.15}, // cluster 1, person 8
		{6, 7, 0.05}, // cluster 1 but person 7: its own question
		{9, 8, 0.01}, // no cluster
	}
	clusterOf := map[int64]int{1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1}
	got := ReviewQueue(sugs, clusterOf)
	want := []ReviewGroup{
		{Person: 7, Cluster: 0, Faces: []int64{2, 3, 1}, Distance: 0.30},
		{Person: 8, Cluster: 1, Faces: []int64{4, 5}, Distance: 0.15},
		{Person: 8, Cluster: -1, Faces: []int64{9}, Distance: 0.01},
		{Person: 7, Cluster: 1, Faces: []int64{6}, Distance: 0.05},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].Person != want[i].Person || got[i].Cluster != want[i].Cluster || !slices.Equal(got[i].Faces, want[i].Faces) || got[i].Distance != want[i].Distance {
			t.Fatalf("question %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSearch(t *testing.T) {
	// Library: person 1's faces at 0 and 0.1, an unnamed face at 0.14 and
	// person 2 at 1.
	lib := scene(t, [][4]float64{{1, 10, 1, 0}, {2, 11, 1, 0.1}, {3, 12, 0, 0.14}, {4, 13, 2, 1}})
	res, err := Search(lib, [][]float32{{0.11}, {5}}, SuggestOptions{Distance: 0.3, Margin: 0.05}, 0.3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Person != 1 || math.Abs(res[0].Distance-0.01) > 1e-6 {
		t.Fatalf("first face: %+v", res[0])
	}
	var faces []int64
	for _, m := range res[0].Matches {
		faces = append(faces, m.Face)
	}
	if want := []int64{2, 3, 1}; !slices.Equal(faces, want) {
		t.Fatalf("matches %v, want %v", faces, want)
	}
	if res[1].Person != 0 || len(res[1].Matches) != 0 {
		t.Fatalf("second face matched: %+v", res[1])
	}
	// Two query faces near person 1: only the closer gets the name.
	res, _ = Search(lib, [][]float32{{0.02}, {0.05}}, SuggestOptions{Distance: 0.3, Margin: 0.05}, 0.3, 1)
	if res[0].Person != 1 || res[1].Person != 0 || len(res[0].Matches) != 1 {
		t.Fatalf("same person twice in one photo: %+v", res)
	}
}

// BenchmarkNearest times one suggestion query (two nearest people) over
// galleries of random unit descriptors, ten faces per person, on one
// goroutine. The budget is 20 ms per query at 100,000 faces.
func BenchmarkNearest(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		g, _ := NewGallery(128)
		for i := 0; i < n; i++ {
			_ = g.Add(int64(i+1), int64(i+1), int64(i/10+1), unitVec(rng, 128))
		}
		q := unitVec(rng, 128)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			c0 := cputime.Process()
			for b.Loop() {
				g.Nearest(q, nil)
			}
			// CPU time per query: the shared machine's load inflates wall
			// time far more than the work done.
			b.ReportMetric(float64(cputime.Process()-c0)/1e6/float64(b.N), "cpu-ms/op")
		})
	}
}

// TestNearestRefusesWrongLength: a query of another length than the
// gallery's matches no one.
func TestNearestRefusesWrongLength(t *testing.T) {
	g, _ := NewGallery(128)
	if b, _ := g.Nearest(make([]float32, 3), nil); b.Person != 0 {
		t.Fatal("a query of the wrong length matched")
	}
}

// TestSuggestOptionsAccepts pins the rule's boundaries: a face exactly at
// Distance is suggested, a second person exactly Margin farther makes it
// abstain, and an empty best or second behaves as no person.
func TestSuggestOptionsAccepts(t *testing.T) {
	o := SuggestOptions{Distance: 0.5, Margin: 0.04}
	none := PersonDistance{}
	for _, c := range []struct {
		name         string
		best, second PersonDistance
		want         bool
	}{
		{"no person", none, none, false},
		{"within, alone", PersonDistance{1, 0.3}, none, true},
		{"at distance", PersonDistance{1, 0.5}, none, true},
		{"beyond distance", PersonDistance{1, 0.51}, none, false},
		{"clear margin", PersonDistance{1, 0.3}, PersonDistance{2, 0.35}, true},
		{"at margin", PersonDistance{1, 0.25}, PersonDistance{2, 0.29}, false},
		{"inside margin", PersonDistance{1, 0.3}, PersonDistance{2, 0.31}, false},
	} {
		if got := o.Accepts(c.best, c.second); got != c.want {
			t.Errorf("%s: Accepts(%v, %v) = %v, want %v", c.name, c.best, c.second, got, c.want)
		}
	}
}
