package nn

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/core/graph"
)

// A dense layer applied once per example, y_b = x_b·W + c, has per-example
// gradients x_b ⊗ g_b for W and g_b for c, where g_b = ∂L/∂y_b. DP-SGD then
// needs neither the [B, In, Out] per-example gradients nor W expanded per
// example: the squared norms are ‖x_b‖²·‖g_b‖² and ‖g_b‖², and the clipped
// sum is Xᵀ·diag(f)·G ("ghost norms": Goodfellow 2015, Li et al. 2022).
// GhostScope binds such parameters unexpanded; the layer records its input
// and output with recordDense, and ClippedSums uses them.

// DenseTap is one ghost dense layer's record in a Scope: its input X
// [B, In], its output Y [B, Out] (before any activation), and the indices
// of its weight and bias parameters (-1 where not ghost).
type DenseTap struct {
	W, Bias int
	X, Y    *graph.Node
}

// GhostScope is ExpandedScope except that parameters declared Ghost (dense
// weights and biases) for which expand holds stay unexpanded: their layer
// records a DenseTap instead, from which ClippedSums derives their
// per-example gradients.
func GhostScope(p *Params, nodes []*graph.Node, batch int, expand func(i int) bool, training bool) (*Scope, []*graph.Node, error) {
	ghost := make([]bool, p.Len())
	s, exp, err := ExpandedScope(p, nodes, batch, func(i int) bool {
		if expand(i) && p.specs[i].Ghost {
			ghost[i] = true
			return false
		}
		return expand(i)
	}, training)
	if err != nil {
		return nil, nil, err
	}
	s.ghost = ghost
	return s, exp, nil
}

// isGhost reports whether parameter name is handled by ghost norms.
func (s *Scope) isGhost(name string) (int, bool) {
	i, ok := s.params.index[name]
	if !ok || s.ghost == nil {
		return -1, false
	}
	return i, s.ghost[i]
}

// recordDense records a dense layer's input and output when its weight or
// bias is ghost. A layer may be recorded once: a second application would
// make its per-example gradient a sum the norm formula does not cover.
func (s *Scope) recordDense(w, b string, x, y *graph.Node) {
	wi, wg := s.isGhost(w)
	bi, bg := -1, false
	if b != "" {
		bi, bg = s.isGhost(b)
	}
	if !wg && !bg {
		return
	}
	if x.Rank() != 2 || y.Rank() != 2 {
		panic(fmt.Sprintf("nn: ghost dense %q needs [B, In] → [B, Out], got %v → %v", w, x.Shape().Dimensions, y.Shape().Dimensions))
	}
	if !wg {
		wi = -1
	}
	if !bg {
		bi = -1
	}
	for _, t := range s.taps {
		if (wi >= 0 && t.W == wi) || (bi >= 0 && t.Bias == bi) {
			panic(fmt.Sprintf("nn: dense %q applied twice under ghost norms", w))
		}
	}
	s.taps = append(s.taps, DenseTap{W: wi, Bias: bi, X: x, Y: y})
}

// DenseTaps returns the ghost dense layers recorded so far.
func (s *Scope) DenseTaps() []DenseTap { return s.taps }

// ClippedSums returns, for each parameter index in params (each expanded or
// ghost in s), Σ_b f_b·∇_b, where ∇_b is example b's gradient of loss (a
// sum of independent per-example losses), f_b = mask_b·min(1, clip/‖∇_b‖)
// and ‖∇_b‖ the norm across all of params: DP-SGD's clipped sum. It also
// returns the per-example norms [B]. expanded are ExpandedScope's or
// GhostScope's expanded nodes.
func ClippedSums(s *Scope, loss *graph.Node, expanded []*graph.Node, params []int, clip float64, mask *graph.Node) ([]*graph.Node, *graph.Node, error) {
	if len(params) == 0 {
		return nil, nil, fmt.Errorf("nn: clipping needs at least one parameter")
	}
	tapOf := map[int]int{}
	for k, t := range s.taps {
		for _, i := range []int{t.W, t.Bias} {
			if i >= 0 {
				tapOf[i] = k
			}
		}
	}
	var nodes []*graph.Node
	for _, i := range params {
		if expanded[i] != nil {
			nodes = append(nodes, expanded[i])
		} else if _, ok := tapOf[i]; !ok {
			return nil, nil, fmt.Errorf("nn: parameter %q is neither expanded nor recorded by a ghost dense layer", s.params.specs[i].Name)
		}
	}
	for _, t := range s.taps {
		nodes = append(nodes, t.Y)
	}
	g := graph.Gradient(loss, nodes...)
	ge, gy := g[:len(g)-len(s.taps)], g[len(g)-len(s.taps):]
	var sq *graph.Node
	add := func(r *graph.Node) {
		if sq == nil {
			sq = r
		} else {
			sq = graph.Add(sq, r)
		}
	}
	for _, gi := range ge {
		axes := make([]int, gi.Rank()-1)
		for a := range axes {
			axes[a] = a + 1
		}
		add(graph.ReduceSum(graph.Square(gi), axes...))
	}
	for k, t := range s.taps {
		g2 := graph.ReduceSum(graph.Square(gy[k]), 1)
		if t.W >= 0 && slices.Contains(params, t.W) {
			add(graph.Mul(graph.ReduceSum(graph.Square(t.X), 1), g2))
		}
		if t.Bias >= 0 && slices.Contains(params, t.Bias) {
			add(g2)
		}
	}
	norm := graph.Sqrt(sq)
	b := norm.Shape().Dimensions[0]
	f := graph.Mul(graph.MinScalar(graph.Div(graph.Scalar(norm.Graph(), norm.DType(), clip), graph.AddScalar(norm, 1e-12)), 1.0), mask)
	out := make([]*graph.Node, len(params))
	e := 0
	for j, i := range params {
		if expanded[i] != nil {
			gi := ge[e]
			e++
			dims := make([]int, gi.Rank())
			for a := range dims {
				dims[a] = 1
			}
			dims[0] = b
			out[j] = graph.ReduceSum(graph.Mul(gi, graph.Reshape(f, dims...)), 0)
			continue
		}
		k := tapOf[i]
		t := s.taps[k]
		fg := graph.Mul(gy[k], graph.Reshape(f, b, 1))
		if i == t.W {
			out[j] = graph.Einsum("bi,bo->io", t.X, fg)
		} else {
			out[j] = graph.ReduceSum(fg, 0)
		}
	}
	return out, norm, nil
}
