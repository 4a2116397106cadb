package loss_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/nntest"
)

func TestLossGradients(t *testing.T) {
	labels := tensors.FromFlatDataAndDimensions([]int32{0, 1, 0, 2, 1, 2}, 6)
	flips := tensors.FromFlatDataAndDimensions([]float64{0, 1, 0, 0, 1, 0}, 6)
	centres := [][]float32{{1, 0, 0, 0}, {0, 0.6, 0.8, 0}}
	cases := []struct {
		name    string
		cfg     loss.Config
		coupled bool
	}{
		{"softmax", loss.Config{Kind: "softmax", Classes: 3}, false},
		{"cosface", loss.Config{Kind: "cosface", Classes: 3, Scale: 4}, false},
		{"arcface", loss.Config{Kind: "arcface", Classes: 3, Scale: 4}, false},
		{"privacyface arcface", loss.Config{Kind: "arcface", Classes: 3, Scale: 4, Rho: 0.3, Centres: centres}, false},
		{"privacyface cosface", loss.Config{Kind: "cosface", Classes: 3, Scale: 4, Rho: 0.3, Centres: centres}, false},
		{"irene", loss.Config{Kind: "irene", Classes: 3, Alpha: 0.8}, false},
		{"triplet hardest", loss.Config{Kind: "triplet"}, true},
		{"triplet semi-hard", loss.Config{Kind: "triplet", SemiHard: true}, true},
		{"distill", loss.Config{Kind: "distill", Classes: 3, Targets: [][]float32{{1, 2, 0, 0}, {0, -1, 0.5, 0}, {0.2, 0.2, 0.2, -3}}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := nn.NewParams()
			fc, err := nn.NewDense(p, "emb", 5, 4, true)
			if err != nil {
				t.Fatal(err)
			}
			h, err := loss.New(p, tc.cfg.Defaults(), 4)
			if err != nil {
				t.Fatal(err)
			}
			if h.Coupled() != tc.coupled {
				t.Fatalf("Coupled() = %v", h.Coupled())
			}
			p.Init(3)
			c := nntest.Case{Params: p, Inputs: []*tensors.Tensor{nntest.Random(4, 6, 5), labels, flips}, Diff: []bool{true},
				Build: func(s *nn.Scope, in []*graph.Node) *graph.Node {
					emb := nn.L2Normalize(fc.Apply(s, in[0]))
					b := loss.Batch{Labels: in[1], Mask: graph.OnesLike(in[2]), Aux: in[2]}
					return h.Apply(s, emb, b).Loss
				}}
			nntest.CheckGradients(t, c)
			nntest.CheckPerExample(t, c, !tc.coupled)
		})
	}
}

// eval runs fn on float64 inputs and returns its flat output.
func eval(t *testing.T, fn func(in []*graph.Node) *graph.Node, in ...*tensors.Tensor) []float64 {
	t.Helper()
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := eng.Backend()
	ex, err := graph.NewExec(b, fn)
	if err != nil {
		t.Fatal(err)
	}
	// Each call runs on an engine of its own, and a tensor is bound to the
	// backend it first ran on: pass copies.
	var args []any
	for _, x := range in {
		c, err := x.LocalClone()
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, c)
	}
	out, err := ex.Call(args...)
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float64](out[0])
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestKnownValues(t *testing.T) {
	cos := tensors.FromFlatDataAndDimensions([]float64{0.5, 0.2, -0.1, 0.3}, 2, 2)
	lab := tensors.FromFlatDataAndDimensions([]int32{0, 1}, 2)
	got := eval(t, func(in []*graph.Node) *graph.Node { return loss.MarginLogits(in[0], in[1], false, 10, 0.35) }, cos, lab)
	want := []float64{10 * (0.5 - 0.35), 2, -1, 10 * (0.3 - 0.35)}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Errorf("cosface logits = %v, want %v", got, want)
			break
		}
	}
	got = eval(t, func(in []*graph.Node) *graph.Node { return loss.MarginLogits(in[0], in[1], true, 10, 0.5) }, cos, lab)
	arc := 10 * math.Cos(math.Acos(0.5)+0.5)
	if !near(got[0], arc) || !near(got[1], 2) {
		t.Errorf("arcface logits = %v, want [%g 2 …]", got, arc)
	}
	// Uniform logits: cross-entropy log N; Irene with α=1 and no flips
	// equals it; with α=0 it is the min-entropy −log max q.
	logits := tensors.FromFlatDataAndDimensions([]float64{0, 0, 0, 0, 1, 2, 3, 4}, 2, 4)
	ce := eval(t, func(in []*graph.Node) *graph.Node { return loss.CrossEntropy(in[0], in[1]) }, logits, lab)
	lse := math.Log(math.Exp(1) + math.Exp(2) + math.Exp(3) + math.Exp(4))
	if !near(ce[0], math.Log(4)) || !near(ce[1], lse-2) {
		t.Errorf("cross-entropy = %v, want [%g %g]", ce, math.Log(4), lse-2)
	}
	ir := eval(t, func(in []*graph.Node) *graph.Node { return loss.Irene(in[0], in[1], nil, 0) }, logits, lab)
	if !near(ir[1], lse-4) {
		t.Errorf("irene α=0 = %v, want min-entropy %g", ir[1], lse-4)
	}
	flip := tensors.FromFlatDataAndDimensions([]float64{0, 1}, 2)
	ir = eval(t, func(in []*graph.Node) *graph.Node { return loss.Irene(in[0], in[1], in[2], 1) }, logits, lab, flip)
	if !near(ir[1], lse-4) || !near(ir[0], math.Log(4)) {
		t.Errorf("irene with E-step flip = %v, want [%g %g] (flipped tag becomes the prediction)", ir, math.Log(4), lse-4)
	}
	// Consensus logits: s inside the ρ-cone, s·cos(θ−ρ) outside.
	f := tensors.FromFlatDataAndDimensions([]float64{1, 0}, 1, 2)
	pc := tensors.FromFlatDataAndDimensions([]float64{math.Cos(0.1), math.Sin(0.1), 0, 1}, 2, 2)
	mu := eval(t, func(in []*graph.Node) *graph.Node { return loss.ConsensusLogits(in[0], in[1], 3, 0.2) }, f, pc)
	if !near(mu[0], 3) || math.Abs(mu[1]-3*math.Cos(math.Pi/2-0.2)) > 1e-6 {
		t.Errorf("consensus logits = %v, want [3 %g]", mu, 3*math.Cos(math.Pi/2-0.2))
	}
}

func TestDistillKnown(t *testing.T) {
	// f·t/|f||t| with t=(0,2) (unit row (0,1)): f=(3,4) → 1−0.8; f=(0,−1) → 2.
	f := tensors.FromFlatDataAndDimensions([]float64{3, 4, 0, -1}, 2, 2)
	rows := tensors.FromFlatDataAndDimensions([]float64{1, 0, 0, 1}, 2, 2)
	lab := tensors.FromFlatDataAndDimensions([]int32{1, 1}, 2)
	got := eval(t, func(in []*graph.Node) *graph.Node { return loss.Distill(in[0], in[1], in[2]) }, f, rows, lab)
	if math.Abs(got[0]-0.2) > 1e-12 || math.Abs(got[1]-2) > 1e-12 {
		t.Errorf("distill = %v, want [0.2 2]", got)
	}
	lab = tensors.FromFlatDataAndDimensions([]int32{0, 1}, 2)
	got = eval(t, func(in []*graph.Node) *graph.Node { return loss.Distill(in[0], in[1], in[2]) }, f, rows, lab)
	if math.Abs(got[0]-0.4) > 1e-12 || math.Abs(got[1]-2) > 1e-12 {
		t.Errorf("distill with labels [0 1] = %v, want [0.4 2]", got)
	}
}

func TestTripletKnown(t *testing.T) {
	// Points on a line: a=0 (label 0), p=1 (label 0), n1=1.2, n2=3 (label 1).
	f := tensors.FromFlatDataAndDimensions([]float64{0, 1, 1.2, 3}, 4, 1)
	lab := tensors.FromFlatDataAndDimensions([]int32{0, 0, 1, 1}, 4)
	mask := tensors.FromFlatDataAndDimensions([]float64{1, 1, 1, 1}, 4)
	hard := eval(t, func(in []*graph.Node) *graph.Node {
		l, _ := loss.Triplet(in[0], in[1], in[2], 0.2, false)
		return l
	}, f, lab, mask)
	// anchor 0: d(a,p)=1, hardest negative d=1.44 → [1−1.44+0.2]₊ = 0.
	// anchor 1: d=1, hardest negative n1: d=0.04 → 1.16.
	// anchor 2: positive 3 d=3.24, hardest negative p(1): 0.04 → 3.4.
	// anchor 3: positive 2 d=3.24, hardest negative p(1): 4 → 0.
	want := []float64{0, 1.16, 3.4, 0}
	for i := range want {
		if math.Abs(hard[i]-want[i]) > 1e-9 {
			t.Fatalf("hardest triplet = %v, want %v", hard, want)
		}
	}
	semi := eval(t, func(in []*graph.Node) *graph.Node {
		l, _ := loss.Triplet(in[0], in[1], in[2], 0.2, true)
		return l
	}, f, lab, mask)
	// anchor 1: negatives farther than 1: n2 at 4 → 0; anchor 2: negatives
	// farther than 3.24: a at 1.44? no; none → farthest negative a (1.44):
	// 3.24−1.44+0.2 = 2.0.
	want = []float64{0, 0, 2.0, 0}
	for i := range want {
		if math.Abs(semi[i]-want[i]) > 1e-9 {
			t.Fatalf("semi-hard triplet = %v, want %v", semi, want)
		}
	}
	// Masked-out examples take no part.
	mask = tensors.FromFlatDataAndDimensions([]float64{1, 1, 0, 1}, 4)
	w := eval(t, func(in []*graph.Node) *graph.Node {
		_, w := loss.Triplet(in[0], in[1], in[2], 0.2, false)
		return w
	}, f, lab, mask)
	if w[0] != 1 || w[1] != 1 || w[2] != 0 || w[3] != 0 {
		t.Errorf("positive counts with example 2 masked = %v, want [1 1 0 0]", w)
	}
}

func TestConfigErrors(t *testing.T) {
	bad := []loss.Config{
		{Kind: "nope"},
		{Kind: "softmax", Classes: 1},
		{Kind: "cosface", Classes: 3, Scale: -1, Margin: 0.3},
		{Kind: "irene", Classes: 3, Alpha: 1.5},
		{Kind: "triplet", Margin: -0.2},
		{Kind: "arcface", Classes: 3, Scale: 8, Margin: 0.5, Rho: 0.1, Centres: [][]float32{{1, 2}}},
		{Kind: "distill"},
		{Kind: "distill", Classes: 2, Targets: [][]float32{{1, 0, 0, 0}}},
		{Kind: "distill", Classes: 1, Targets: [][]float32{{1, 0}}},
		{Kind: "distill", Classes: 1, Targets: [][]float32{{0, 0, 0, 0}}},
	}
	for _, c := range bad {
		if _, err := loss.New(nn.NewParams(), c, 4); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
