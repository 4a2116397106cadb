package metric

import (
	"math/rand/v2"
	"testing"
)

func randomVectors(rng *rand.Rand, n, d int) [][]float64 {
	x := make([][]float64, n)
	for i := range x {
		x[i] = make([]float64, d)
		for k := range x[i] {
			x[i][k] = rng.NormFloat64()
		}
	}
	return x
}

// withinCount counts the unnamed faces whose nearest named face is within
// t under m.
func withinCount(m *Metric, named, unnamed [][]float64, t float64) int {
	tn := make([][]float64, len(named))
	for i, v := range named {
		tn[i] = m.Transform(nil, v)
	}
	n := 0
	for _, u := range unnamed {
		if nearestDist(m.Transform(nil, u), tn) <= t {
			n++
		}
	}
	return n
}

// Known optimum: under V = s·R every distance is s times the plain one,
// so exactly the same unnamed faces must be within the carried threshold;
// under any map, as many as under plain descriptors.
func TestMatchThresholdKeepsTheSuggestedCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	named, unnamed := randomVectors(rng, 40, 8), randomVectors(rng, 200, 8)
	r, err := RandomRotation([32]byte{9}, 8)
	if err != nil {
		t.Fatal(err)
	}
	skew := make([]float64, 64)
	for i := range skew {
		skew[i] = rng.NormFloat64()
	}
	general, err := NewMetric(8, 8, skew)
	if err != nil {
		t.Fatal(err)
	}
	for _, plain := range []float64{1.5, 2.5, 3.5} {
		want := withinCount(Identity(8), named, unnamed, plain)
		for _, s := range []float64{1, 0.5, 3} {
			m, err := r.Scale(s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := MatchThreshold(m, named, unnamed, plain)
			if err != nil {
				t.Fatal(err)
			}
			if n := withinCount(m, named, unnamed, got); n != want {
				t.Errorf("plain %v, scale %v: %d faces within %v, %d under plain descriptors", plain, s, n, got, want)
			}
			if got > s*plain*1.3 || got < s*plain/1.3 {
				t.Errorf("plain %v, scale %v: threshold %v far from %v", plain, s, got, s*plain)
			}
		}
		got, err := MatchThreshold(general, named, unnamed, plain)
		if err != nil {
			t.Fatal(err)
		}
		if n := withinCount(general, named, unnamed, got); n != want {
			t.Errorf("plain %v, general map: %d faces within %v, want %d", plain, n, got, want)
		}
		t.Logf("plain %v: %d of %d unnamed faces within", plain, want, len(unnamed))
	}
	// Nothing or everything within.
	if got, _ := MatchThreshold(r, named, unnamed, 1e-9); withinCount(r, named, unnamed, got) != 0 {
		t.Error("a tiny plain threshold carried over suggests something")
	}
	if got, _ := MatchThreshold(r, named, unnamed, 1e9); withinCount(r, named, unnamed, got) != len(unnamed) {
		t.Error("a huge plain threshold carried over does not suggest everything")
	}
}

func TestMatchThresholdBadInputs(t *testing.T) {
	id := Identity(1)
	x := [][]float64{{0}, {1}}
	for _, tc := range []struct {
		name           string
		named, unnamed [][]float64
		plain          float64
	}{
		{"no named", nil, x, 0.5},
		{"no unnamed", x, nil, 0.5},
		{"threshold", x, x, 0},
		{"size", [][]float64{{0, 1}}, x, 0.5},
	} {
		if _, err := MatchThreshold(id, tc.named, tc.unnamed, tc.plain); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
