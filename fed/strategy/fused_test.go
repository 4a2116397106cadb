package strategy

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/cputime"
)

// TestApplySumIsApplyOfTheMean: fedavg's fused ApplySum gives the model
// Apply gives from Mean, bit for bit (uniform and by examples, with and
// without DP's server learning rate, 1 to 40 updates, values of every
// magnitude), and refuses what they refuse: an empty sum, a sum of
// another layout.
func TestApplySumIsApplyOfTheMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	model := wire.Weights{{Name: "w", Shape: []int{3, 333}, Values: make([]float32, 999)}, {Name: "b", Shape: []int{17}, Values: make([]float32, 17)}}
	for _, o := range []Options{{Name: "fedavg"}, {Name: "fedavg", DP: true}, {Name: "fedavg", Weighting: "examples"}, {Name: "fedavg", ServerLR: 0.37}} {
		st, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		fused, ok := st.(SumApplier)
		if !ok {
			t.Fatalf("%+v: fedavg has no ApplySum", o)
		}
		for _, n := range []int{1, 2, 7, 40} {
			for i := range model {
				for j := range model[i].Values {
					model[i].Values[j] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-4)))
				}
			}
			sum := NewSum(model)
			for range n {
				up := model.Clone()
				for i := range up {
					for j := range up[i].Values {
						up[i].Values[j] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-6)))
					}
				}
				w, err := st.Weight(uint64(1 + rng.IntN(500)))
				if err != nil {
					t.Fatal(err)
				}
				if err := sum.Add(up, w); err != nil {
					t.Fatal(err)
				}
			}
			mean, err := sum.Mean()
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := st.Apply(model, mean, sum.Count, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, state, err := fused.ApplySum(model, sum, nil)
			if err != nil || state != nil {
				t.Fatalf("%+v, %d updates: ApplySum: %v, state %v", o, n, err, state)
			}
			if err := want.SameLayout(got); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				for j := range want[i].Values {
					if math.Float32bits(want[i].Values[j]) != math.Float32bits(got[i].Values[j]) {
						t.Fatalf("%+v, %d updates: value %d/%d is %g, Apply(Mean) gives %g", o, n, i, j, got[i].Values[j], want[i].Values[j])
					}
				}
			}
		}
		if _, _, err := fused.ApplySum(model, NewSum(model), nil); err == nil {
			t.Errorf("%+v: an empty sum was applied", o)
		}
		other := NewSum(wire.Weights{{Name: "w", Shape: []int{999}, Values: make([]float32, 999)}, {Name: "b", Shape: []int{17}, Values: make([]float32, 17)}})
		other.Count, other.Weight = 1, 1
		if _, _, err := fused.ApplySum(model, other, nil); err == nil {
			t.Errorf("%+v: a sum of another layout was applied", o)
		}
	}
}

// BenchmarkApplySum compares the fused step with Mean then Apply on the
// head's size (557,824 values) from 20 updates.
func BenchmarkApplySum(b *testing.B) {
	n := 557824
	model := wire.Weights{{Name: "w", Shape: []int{n}, Values: make([]float32, n)}}
	sum := NewSum(model)
	for j := range sum.Values {
		sum.Values[j] = float64(j%1000) * 1e-3
	}
	sum.Count, sum.Weight = 20, 20
	st, _ := New(Options{Name: "fedavg", DP: true})
	b.Run("fused", func(b *testing.B) {
		cpu0 := cputime.Process()
		for b.Loop() {
			if _, _, err := st.(SumApplier).ApplySum(model, sum, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("mean-then-apply", func(b *testing.B) {
		cpu0 := cputime.Process()
		defer func() { b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op") }()
		for b.Loop() {
			mean, err := sum.Mean()
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := st.Apply(model, mean, sum.Count, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
