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
//
// An example whose gradient norm is not finite (a NaN or ±Inf anywhere in
// its gradient, or a norm that overflows) contributes nothing: its clip
// factor is 0 and its gradient is replaced by zeros before the sum, so that
// 0·NaN cannot poison the other examples' contributions. Its reported norm
// is 0.
func ClippedSums(s *Scope, loss *graph.Node, expanded []*graph.Node, params []int, clip float64, mask *graph.Node) ([]*graph.Node, *graph.Node, error) {
	return clippedSums(s, loss, expanded, params, clip, mask, nil)
}

// ClippedGroupSums is ClippedSums for group-level DP-SGD (a group is one
// person's examples): groups [B] (an integer dtype) assigns example b to
// group groups[b] ∈ [0, B) of the micro-batch, and the clipped unit is the
// group's gradient, the sum of its unmasked examples' gradients:
//
//	sums = Σ_g f_g·Σ_{b∈g} ∇_b,  f_g = min(1, clip/‖Σ_{b∈g} ∇_b‖).
//
// So one group, whatever its number of examples, moves the sum by at most
// clip. It returns the sums and the groups' norms [B] (0 for an empty
// group). Examples with a non-finite gradient norm are dropped from their
// group as in ClippedSums; a group whose norm is not finite (overflow)
// contributes nothing.
//
// Dense layers' group norms need no per-example weights either:
// ‖Σ_{b∈g} x_b g_bᵀ‖²_F = Σ_{b,b'∈g} (x_b·x_b')(g_b·g_b'), computed from the
// micro-batch's Gram matrices of inputs and output gradients, and the
// clipped sum is Xᵀ·diag(f_{g(b)})·G. Expanded parameters' per-example
// gradients are summed per group (a one-hot group matrix) before the norm.
func ClippedGroupSums(s *Scope, loss *graph.Node, expanded []*graph.Node, params []int, clip float64, mask, groups *graph.Node) ([]*graph.Node, *graph.Node, error) {
	if groups == nil {
		return nil, nil, fmt.Errorf("nn: group clipping needs the examples' groups")
	}
	if groups.Rank() != 1 || !groups.DType().IsInt() {
		return nil, nil, fmt.Errorf("nn: groups must be a vector of integers, got %s", groups.Shape())
	}
	return clippedSums(s, loss, expanded, params, clip, mask, groups)
}

// clippedSums implements ClippedSums (groups nil: every example is its own
// group) and ClippedGroupSums.
func clippedSums(s *Scope, loss *graph.Node, expanded []*graph.Node, params []int, clip float64, mask, groups *graph.Node) ([]*graph.Node, *graph.Node, error) {
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
	usesW := func(t DenseTap) bool { return t.W >= 0 && slices.Contains(params, t.W) }
	usesB := func(t DenseTap) bool { return t.Bias >= 0 && slices.Contains(params, t.Bias) }

	// Per-example squared norms, also in the group case: they find the
	// examples whose gradient is not finite.
	var sq *graph.Node
	add := func(r *graph.Node) {
		if sq == nil {
			sq = r
		} else {
			sq = graph.Add(sq, r)
		}
	}
	for _, gi := range ge {
		add(graph.ReduceSum(graph.Square(gi), restAxes(gi)...))
	}
	for k, t := range s.taps {
		g2 := graph.ReduceSum(graph.Square(gy[k]), 1)
		if usesW(t) {
			add(graph.Mul(graph.ReduceSum(graph.Square(t.X), 1), g2))
		}
		if usesB(t) {
			add(g2)
		}
	}
	b := sq.Shape().Dimensions[0]
	dt := sq.DType()
	gr := sq.Graph()
	ok := graph.IsFinite(sq)
	zero := graph.ScalarZero(gr, dt)
	finite := func(x *graph.Node) *graph.Node { return graph.Where(ok, x, zero) }
	for k := range ge {
		ge[k] = finite(ge[k])
	}
	xs := make([]*graph.Node, len(s.taps))
	for k, t := range s.taps {
		gy[k] = finite(gy[k])
		if usesW(t) {
			xs[k] = finite(t.X)
		}
	}
	// factor turns norms into clip factors, 0 where the norm is not finite.
	factor := func(norm *graph.Node) *graph.Node {
		f := graph.MinScalar(graph.Div(graph.Scalar(gr, dt, clip), graph.AddScalar(norm, 1e-12)), 1.0)
		return graph.Where(graph.IsFinite(norm), f, zero)
	}
	var f, norm *graph.Node
	if groups == nil {
		norm = graph.Sqrt(graph.Where(ok, sq, zero))
		f = graph.Mul(factor(norm), mask)
	} else {
		if d := groups.Shape().Dimensions[0]; d != b {
			return nil, nil, fmt.Errorf("nn: %d group indices for a batch of %d", d, b)
		}
		// m[b, g] = mask_b·[groups_b = g]: masked examples are in no group.
		m := graph.Mul(graph.OneHot(groups, b, dt), graph.Reshape(graph.ConvertDType(mask, dt), b, 1))
		var gsq *graph.Node
		addG := func(r *graph.Node) {
			if gsq == nil {
				gsq = r
			} else {
				gsq = graph.Add(gsq, r)
			}
		}
		for _, gi := range ge {
			sum := graph.Einsum("bg,bp->gp", m, graph.Reshape(gi, b, -1))
			addG(graph.ReduceSum(graph.Square(sum), 1))
		}
		for k, t := range s.taps {
			if usesW(t) {
				// diag(Mᵀ·((X·Xᵀ) ⊙ (G·Gᵀ))·M)
				gram := graph.Mul(graph.Einsum("bi,ci->bc", xs[k], xs[k]), graph.Einsum("bo,co->bc", gy[k], gy[k]))
				addG(graph.ReduceSum(graph.Mul(m, graph.Dot(gram, m).Product()), 0))
			}
			if usesB(t) {
				sum := graph.Einsum("bg,bo->go", m, gy[k])
				addG(graph.ReduceSum(graph.Square(sum), 1))
			}
		}
		norm = graph.Sqrt(gsq)
		fg := factor(norm)
		// Each example takes its group's factor (0 when masked).
		f = graph.ReduceSum(graph.Mul(m, graph.Reshape(fg, 1, b)), 1)
		norm = graph.Where(graph.IsFinite(norm), norm, zero)
	}
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
			out[j] = graph.Einsum("bi,bo->io", xs[k], fg)
		} else {
			out[j] = graph.ReduceSum(fg, 0)
		}
	}
	return out, norm, nil
}

// restAxes lists every axis of x but the first.
func restAxes(x *graph.Node) []int {
	axes := make([]int, x.Rank()-1)
	for a := range axes {
		axes[a] = a + 1
	}
	return axes
}
