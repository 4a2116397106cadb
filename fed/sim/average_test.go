package sim

import (
	"testing"

	"github.com/veil-privacy/veil/fed/wire"
)

// TestAverageOfRounds checks the rounds' moving average against values
// computed by hand: the plain mean of the rounds while the window
// 1/(1−β) is not full, exponential after, and the last model with β = 0.
func TestAverageOfRounds(t *testing.T) {
	cases := []struct {
		name  string
		decay float64
		want  []float32 // after each of the rounds 1, 3, 5, 7, 9
	}{
		{"mean while the window fills", 0.9, []float32{1, 2, 3, 4, 5}},
		// d = 0, 1/2, then min(0.5, 2/3) = 0.5: 3.5, 0.5·3.5 + 0.5·7, …
		{"exponential once full", 0.5, []float32{1, 2, 3.5, 5.25, 7.125}},
		{"no average", 0, []float32{1, 3, 5, 7, 9}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := &average{decay: c.decay, curve: true}
			for k := range c.want {
				v := float32(2*k + 1)
				a.add(wire.Weights{{Name: "w", Shape: []int{2}, Values: []float32{v, -v}}})
				if got := a.avg[0].Values; got[0] != c.want[k] || got[1] != -c.want[k] {
					t.Fatalf("after round %d: %v, want ±%g", k+1, got, c.want[k])
				}
			}
			if len(a.rounds) != len(c.want) || a.rounds[0][0].Values[0] != 1 || a.avgs[len(c.want)-1][0].Values[0] != c.want[len(c.want)-1] {
				t.Errorf("curve: %d rounds kept, first %v", len(a.rounds), a.rounds[0][0].Values)
			}
		})
	}
}
