package collab

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/tagging/psimodel"
)

// TestModelFileAppliesAsPsi: a saved ψ, parsed back, maps descriptors as
// ψ itself does (linear and MLP heads, non-zero weights).
func TestModelFileAppliesAsPsi(t *testing.T) {
	for _, hidden := range []int{0, 8} {
		ψ, err := NewPsi(PsiOptions{Dim: 6, Hidden: hidden, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		w := ψ.Weights()
		for n, v := range w {
			for i := range v {
				v[i] = float32(math.Sin(float64(i+len(n)))) * 0.3
			}
		}
		if err := ψ.SetWeights(w); err != nil {
			t.Fatal(err)
		}
		b, err := ψ.MarshalModel()
		if err != nil {
			t.Fatal(err)
		}
		m, err := psimodel.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		x := []float32{0.1, -0.2, 0.3, 0.05, -0.4, 0.25}
		want, _ := ψ.Apply(x)
		got, err := m.Apply(x)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if want[i] != got[i] { // same float64 sums in the same order: bit-equal
				t.Fatalf("hidden %d: file gives %v, ψ %v", hidden, got, want)
			}
		}
	}
}
