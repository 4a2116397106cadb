package metric

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Known optimum: under V = s·R, R orthogonal, every distance is s times
// the plain one, so the carried threshold is exactly s·T.
func TestMatchThresholdScaledRotation(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var x [][]float64
	var labels []int
	for i := range 60 {
		v := make([]float64, 8)
		for k := range v {
			v[k] = rng.NormFloat64()
		}
		x = append(x, v)
		labels = append(labels, i%12)
	}
	labels[5] = Unnamed // ignored
	r, err := RandomRotation([32]byte{9}, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []float64{1, 0.5, 3} {
		m, err := r.Scale(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := MatchThreshold(m, x, labels, 0.45, DefaultThresholdQuantile)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-s*0.45) > 1e-9 {
			t.Errorf("scale %v: threshold %v, want %v", s, got, s*0.45)
		}
	}
}

// A map that stretches only the direction separating people moves the
// impostors away and the threshold up; one that shrinks it moves it down.
func TestMatchThresholdFollowsImpostors(t *testing.T) {
	x := [][]float64{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}}
	labels := []int{0, 0, 1, 1, 2, 2} // people differ along the first axis
	stretch, _ := NewMetric(2, 2, []float64{2, 0, 0, 1})
	shrink, _ := NewMetric(2, 2, []float64{0.5, 0, 0, 1})
	up, err := MatchThreshold(stretch, x, labels, 0.5, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	down, err := MatchThreshold(shrink, x, labels, 0.5, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if up != 1 || down != 0.25 {
		t.Errorf("stretched %v (want 1), shrunk %v (want 0.25)", up, down)
	}
}

func TestMatchThresholdBadInputs(t *testing.T) {
	id := Identity(1)
	x := [][]float64{{0}, {1}}
	for _, tc := range []struct {
		name   string
		labels []int
		plain  float64
		q      float64
	}{
		{"one person", []int{0, 0}, 0.5, 0.05},
		{"no names", []int{-1, -1}, 0.5, 0.05},
		{"threshold", []int{0, 1}, 0, 0.05},
		{"quantile", []int{0, 1}, 0.5, 1},
		{"labels", []int{0}, 0.5, 0.05},
	} {
		if _, err := MatchThreshold(id, x, tc.labels, tc.plain, tc.q); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := MatchThreshold(id, [][]float64{{0}, {0}}, []int{0, 1}, 0.5, 0.05); err == nil {
		t.Error("coinciding people accepted")
	}
}
