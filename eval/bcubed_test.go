package eval

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBCubedScores(t *testing.T) {
	// Each case is worked out by hand, item by item.
	cases := []struct {
		name              string
		clusters, classes []int
		p, r              float64
	}{
		{"perfect", []int{0, 0, 1}, []int{5, 5, 7}, 1, 1},
		{"all in one", []int{0, 0, 0, 0}, []int{1, 1, 2, 2},
			// every item: 2 of 4 in its cluster share its class; its class is whole.
			0.5, 1},
		{"all singletons", []int{0, 1, 2, 3}, []int{1, 1, 2, 2},
			// precision 1 each; recall 1/2 each.
			1, 0.5},
		{"mixed", []int{0, 0, 0, 1, 1}, []int{1, 1, 2, 2, 2},
			// cluster 0 = {a1,a1,b}: a items precision 2/3, b 1/3; cluster 1 = {b,b}: 1, 1.
			// P = (2/3+2/3+1/3+1+1)/5 = 11/15.
			// class a (2 items) both in cluster 0: recall 1, 1; class b (3 items): 1/3, 2/3, 2/3.
			// R = (1+1+1/3+2/3+2/3)/5 = 11/15.
			11.0 / 15, 11.0 / 15},
		{"labels need not be dense", []int{-1, 100, 100}, []int{9, 3, 3}, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := BCubedScores(c.clusters, c.classes)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(s.Precision-c.p) > 1e-12 || math.Abs(s.Recall-c.r) > 1e-12 {
				t.Fatalf("precision %v recall %v, want %v %v", s.Precision, s.Recall, c.p, c.r)
			}
			if f := 2 * c.p * c.r / (c.p + c.r); math.Abs(s.F1-f) > 1e-12 {
				t.Fatalf("F1 %v, want %v", s.F1, f)
			}
		})
	}
}

func TestBCubedScoresBadInput(t *testing.T) {
	if _, err := BCubedScores([]int{1}, []int{1, 2}); err == nil {
		t.Fatal("mismatched lengths accepted")
	}
	if _, err := BCubedScores(nil, nil); err == nil {
		t.Fatal("empty input accepted")
	}
}

// The same labels give bit-identical scores every time: the sums run in
// the items' order, not a map's (whose order Go randomises, so that two
// runs of veil bench tagging differed in the last bits and a tie between
// two clustering settings could go either way).
func TestBCubedScoresAreReproducible(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	clusters, classes := make([]int, 2000), make([]int, 2000)
	for i := range clusters {
		clusters[i], classes[i] = rng.IntN(300), rng.IntN(200)
	}
	first, err := BCubedScores(clusters, classes)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if got, _ := BCubedScores(clusters, classes); got != first {
			t.Fatalf("scores %+v, then %+v", first, got)
		}
	}
}
