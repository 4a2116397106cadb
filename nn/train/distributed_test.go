package train_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/core/graph"

	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// sumHead's loss is the sum of the embedding's values: for a dense layer
// y = Wx + b, an example's gradient is x for every row of W and 1 for b,
// so a person's clipped gradient can be computed by hand.
type sumHead struct{}

func (sumHead) Apply(_ *nn.Scope, emb *graph.Node, b loss.Batch) loss.Result {
	return loss.Result{Loss: graph.Mul(graph.ReduceSum(emb, 1), b.Mask), Weight: b.Mask}
}
func (sumHead) Logits(*nn.Scope, *graph.Node) *graph.Node { return nil }
func (sumHead) Coupled() bool                             { return false }
func (sumHead) AuxProb() float64                          { return 0 }

// ClippedSum returns the sum, over the people it Poisson-sampled, of each
// person's gradient clipped to C, without noise and without moving the
// weights; ApplyReleased then takes exactly the optimiser step with the
// sum it is given, and records the mechanism and ε it is told.
func TestClippedSumAndApplyReleased(t *testing.T) {
	const in, out, persons, clip, q = 3, 2, 12, 1.5, 0.5
	var ids []int
	for p := range persons {
		for range 1 + p%3 {
			ids = append(ids, p)
		}
	}
	d := randomData(len(ids), in, 21)
	data := people{memData: d, ids: ids, n: persons}
	m, err := newDenseModel(in, out)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(m, sumHead{}, train.Options{Optimizer: "sgd", LearningRate: 1, MicroBatch: 8,
		DP: &train.DPOptions{Unit: train.UnitIdentity, NoiseMultiplier: 1, Clip: clip, SamplingRate: q, Delta: 1e-5,
			DatasetSize: 1000, Source: seeded(9)}})
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(tr)
	sum, res, err := tr.ClippedSum(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.requests) != 1 || res.Examples != len(d.requests[0]) || res.Examples == 0 {
		t.Fatalf("one sample expected, got %d requests, %d examples", len(d.requests), res.Examples)
	}
	for i, v := range snapshot(tr) {
		for j := range v {
			if v[j] != before[i][j] {
				t.Fatal("ClippedSum moved the weights")
			}
		}
	}
	// By hand: per sampled person, g = (Σ x for each of the out rows, 1
	// per image for each bias), clipped to C.
	per := map[int][]int{}
	for _, i := range d.requests[0] {
		per[ids[i]] = append(per[ids[i]], i)
	}
	wantX := make([]float64, in) // Σ over people of their clipped Σx
	var wantB float64
	for _, imgs := range per {
		x := make([]float64, in)
		for _, i := range imgs {
			for k := range in {
				x[k] += float64(d.x[i*in+k])
			}
		}
		n := float64(len(imgs))
		norm2 := float64(out) * n * n
		for _, v := range x {
			norm2 += float64(out) * v * v
		}
		c := math.Min(1, clip/math.Sqrt(norm2))
		for k := range x {
			wantX[k] += c * x[k]
		}
		wantB += c * n
	}
	p := m.Params()
	off := 0
	for i := 0; i < p.Len(); i++ {
		sp := p.Spec(i)
		for j := range sp.Size() {
			var want float64
			switch len(sp.Shape) {
			case 1:
				want = wantB
			case 2:
				k := j / out // [in, out] row-major
				if sp.Shape[0] == out {
					k = j % in // [out, in]
				}
				want = wantX[k]
			}
			if got := float64(sum[off+j]); math.Abs(got-want) > 1e-4*math.Max(1, math.Abs(want)) {
				t.Fatalf("%s[%d]: clipped sum %g, by hand %g", sp.Name, j, got, want)
			}
		}
		off += sp.Size()
	}
	if off != len(sum) {
		t.Fatalf("sum of %d values for %d trainable", len(sum), off)
	}

	const scale = 0.25
	if err := tr.ApplyReleased(sum, scale, "distributed test mechanism", 1.5); err != nil {
		t.Fatal(err)
	}
	off = 0
	after := snapshot(tr)
	for i := range after {
		for j := range after[i] {
			want := before[i][j] - float32(scale)*sum[off+j]
			if math.Abs(float64(after[i][j]-want)) > 1e-6 {
				t.Fatalf("parameter %d[%d]: %g after the step, want %g", i, j, after[i][j], want)
			}
		}
		off += len(after[i])
	}
	pr := tr.Privacy()
	if pr.Steps != 1 || pr.Epsilon != 1.5 || pr.Mechanism != "distributed test mechanism" || !pr.Bounded() {
		t.Errorf("privacy after a released step: %+v", pr)
	}
	for name, call := range map[string]func() error{
		"short sum":    func() error { return tr.ApplyReleased(sum[1:], scale, "m", 1) },
		"zero scale":   func() error { return tr.ApplyReleased(sum, 0, "m", 1) },
		"no mechanism": func() error { return tr.ApplyReleased(sum, scale, "", 1) },
		"no ε":         func() error { return tr.ApplyReleased(sum, scale, "m", 0) },
	} {
		if call() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	plain, _ := newFlat(t, in, out, 8, nil)
	if _, _, err := plain.ClippedSum(data, nil); err == nil {
		t.Error("ClippedSum without DP options accepted")
	}
}
