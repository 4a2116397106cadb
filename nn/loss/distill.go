package loss

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/nn"
)

// distillHead pulls each example's embedding towards a fixed teacher
// embedding of the same image: loss = 1 − cos(f + b, t), with f the unit
// embedding and b a learned vector of the head. The teacher (face-api's
// pretrained descriptor, a public model) is a deterministic function of
// the example alone, so the loss is per-example and DP-SGD's sensitivity
// bound holds.
//
// b exists because face descriptors share a common component c (two
// strangers' descriptors are far from orthogonal): without it the cheapest
// way to lower the loss is to emit c's direction for every face, which
// tells no one apart. With f + b ≈ λ(c + r), b takes the common part and the
// embedding f, which is what is evaluated, is left with the individual
// part r. Like a classifier's weights, b stays in the head.
type distillHead struct {
	targets *tensors.Tensor
	d       int
}

// distillCentre names the head's common-component vector b.
const distillCentre = "head/centre"

func newDistillHead(p *nn.Params, c Config, d int) (Head, error) {
	if len(c.Targets) == 0 || c.Classes != len(c.Targets) {
		return nil, fmt.Errorf("loss: distill needs one target per example: %d targets for %d labels", len(c.Targets), c.Classes)
	}
	flat := make([]float32, 0, len(c.Targets)*d)
	for i, t := range c.Targets {
		if len(t) != d {
			return nil, fmt.Errorf("loss: distill target %d has dimension %d, want %d", i, len(t), d)
		}
		var n float64
		for _, v := range t {
			n += float64(v) * float64(v)
		}
		if !(n > 0) || math.IsInf(n, 0) {
			return nil, fmt.Errorf("loss: distill target %d has no direction (norm² %g)", i, n)
		}
		for _, v := range t {
			flat = append(flat, float32(float64(v)/math.Sqrt(n)))
		}
	}
	if err := p.Declare(nn.ParamSpec{Name: distillCentre, Shape: []int{d}, Init: nn.InitZeros}); err != nil {
		return nil, err
	}
	return &distillHead{targets: tensors.FromFlatDataAndDimensions(flat, len(c.Targets), d), d: d}, nil
}

func (h *distillHead) Logits(*nn.Scope, *Node) *Node { return nil }
func (h *distillHead) Coupled() bool                 { return false }
func (h *distillHead) AuxProb() float64              { return 0 }

func (h *distillHead) Apply(s *nn.Scope, emb *Node, b Batch) Result {
	w, perExample := s.W(distillCentre)
	if !perExample {
		w = graph.Reshape(w, 1, h.d)
	}
	f := graph.Add(emb, w)
	return Result{Loss: graph.Mul(Distill(f, graph.Const(emb.Graph(), h.targets), b.Labels), b.Mask), Weight: b.Mask}
}

// Distill is 1 − cos(f_i, t[label_i]) per example: embeddings f [B,D],
// unit teacher rows t [N,D], labels [B] indexing t → [B].
func Distill(f, t, labels *Node) *Node {
	t = graph.ConvertDType(t, f.DType())
	rows := graph.Gather(t, graph.ExpandAxes(labels, -1))
	cos := graph.ReduceSum(graph.Mul(nn.L2Normalize(f), rows), 1)
	return graph.OneMinus(cos)
}
