// Package loss holds the training objectives of Veil's face networks as
// GoMLX graph functions returning per-example losses (so DP-SGD can clip
// each example's gradient): softmax cross-entropy; CosFace and ArcFace
// with scale s and margin m; PrivacyFace's consensus-aware variant (Eq. 5 of
// Meng et al.) with extra negatives from cluster centres; triplet loss with
// online hardest or semi-hard negative mining (LightFace §2.3); and Irene's
// bootstrapping loss with min-entropy regularisation and EM-style label
// correction (Eq. 2 of Zheng et al.).
package loss

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/nn"
)

// Node is a GoMLX graph node.
type Node = graph.Node

// Batch is what a loss sees besides the embeddings: integer labels [B],
// a 0/1 mask [B] of real (not padding) examples in the embeddings' dtype,
// and optional per-example auxiliary flags [B] (Irene's E-step draws).
type Batch struct {
	Labels, Mask, Aux *Node
}

// Result is a per-example loss [B] (zero on padding) and per-example
// weight [B]: the batch objective is ΣLoss / ΣWeight.
type Result struct {
	Loss, Weight *Node
}

// ParamPrefix starts the names of every loss head's parameters.
const ParamPrefix = "head/"

// Head turns embeddings into a loss, with its own parameters (classifier
// rows) declared in the model's Params under ParamPrefix.
type Head interface {
	// Apply computes the per-example loss of embeddings emb [B,D].
	Apply(s *nn.Scope, emb *Node, b Batch) Result
	// Logits returns class scores [B,N] for accuracy (nil if the head has
	// no classifier, like triplet).
	Logits(s *nn.Scope, emb *Node) *Node
	// Coupled reports whether one example's loss depends on other examples
	// of the batch (triplet mining): such losses have no per-example
	// sensitivity bound and are refused under DP-SGD.
	Coupled() bool
	// AuxProb is the probability with which the trainer sets each
	// example's Aux flag (0: the head uses no Aux).
	AuxProb() float64
}

// Config selects and parameterises a head; it is saved in checkpoints.
type Config struct {
	// Kind is softmax, cosface, arcface, triplet, irene or distill.
	Kind string `json:"kind"`
	// Classes is the number of training identities (not for triplet);
	// for distill, the number of targets.
	Classes int `json:"classes,omitempty"`
	// Scale s and Margin m for cosface/arcface; Margin α for triplet.
	Scale  float64 `json:"scale,omitempty"`
	Margin float64 `json:"margin,omitempty"`
	// SemiHard selects semi-hard instead of hardest negatives (triplet).
	SemiHard bool `json:"semi_hard,omitempty"`
	// Alpha weights Irene's cross-entropy against min-entropy (Eq. 2) and
	// is the probability of keeping a tag in the E-step.
	Alpha float64 `json:"alpha,omitempty"`
	// Rho is PrivacyFace's margin ρ for the cluster-centre negatives; used
	// when Centres is set (cosface/arcface only).
	Rho float64 `json:"rho,omitempty"`
	// Centres are PrivacyFace's cluster centres p̂ [Q][D] from other
	// clients (normalised on use). Not saved in checkpoints.
	Centres [][]float32 `json:"-"`
	// Targets are distill's teacher embeddings [Classes][D], one per
	// training example: an example's label is the index of its target.
	// Not saved in checkpoints.
	Targets [][]float32 `json:"-"`
}

// Defaults fills zero fields with the papers' values: s=64 and m=0.35
// (CosFace) or m=0.5 (ArcFace); triplet α=0.2; Irene α=0.9.
func (c Config) Defaults() Config {
	switch c.Kind {
	case "cosface", "arcface":
		if c.Scale == 0 {
			c.Scale = 64
		}
		if c.Margin == 0 {
			c.Margin = 0.35
			if c.Kind == "arcface" {
				c.Margin = 0.5
			}
		}
	case "triplet":
		if c.Margin == 0 {
			c.Margin = 0.2
		}
	case "irene":
		if c.Alpha == 0 {
			c.Alpha = 0.9
		}
	}
	return c
}

// New validates c and declares the head's parameters in p for embeddings
// of dimension d.
func New(p *nn.Params, c Config, d int) (Head, error) {
	switch c.Kind {
	case "softmax", "irene", "cosface", "arcface":
		if c.Classes < 2 {
			return nil, fmt.Errorf("loss: %s needs at least 2 classes, got %d", c.Kind, c.Classes)
		}
	}
	switch c.Kind {
	case "softmax", "irene":
		if c.Kind == "irene" && !(c.Alpha > 0 && c.Alpha <= 1) {
			return nil, fmt.Errorf("loss: irene α must be in (0, 1], got %g", c.Alpha)
		}
		fc, err := nn.NewDense(p, "head/fc", d, c.Classes, true)
		if err != nil {
			return nil, err
		}
		return &softmaxHead{fc: fc, irene: c.Kind == "irene", alpha: c.Alpha}, nil
	case "cosface", "arcface":
		if !(c.Scale > 0) || c.Margin < 0 || c.Margin >= math.Pi/2 {
			return nil, fmt.Errorf("loss: %s needs scale > 0 and margin in [0, π/2), got s=%g m=%g", c.Kind, c.Scale, c.Margin)
		}
		cls, err := nn.NewCosineClassifier(p, "head/cls", d, c.Classes)
		if err != nil {
			return nil, err
		}
		h := &marginHead{cls: cls, arc: c.Kind == "arcface", s: c.Scale, m: c.Margin, rho: c.Rho}
		if len(c.Centres) > 0 {
			if c.Rho < 0 || c.Rho >= math.Pi {
				return nil, fmt.Errorf("loss: consensus margin ρ must be in [0, π), got %g", c.Rho)
			}
			flat := make([]float32, 0, len(c.Centres)*d)
			for i, r := range c.Centres {
				if len(r) != d {
					return nil, fmt.Errorf("loss: cluster centre %d has dimension %d, want %d", i, len(r), d)
				}
				flat = append(flat, r...)
			}
			h.centres = tensors.FromFlatDataAndDimensions(flat, len(c.Centres), d)
		}
		return h, nil
	case "triplet":
		if !(c.Margin > 0) {
			return nil, fmt.Errorf("loss: triplet margin α must be positive, got %g", c.Margin)
		}
		return &tripletHead{alpha: c.Margin, semi: c.SemiHard}, nil
	case "distill":
		return newDistillHead(p, c, d)
	}
	return nil, fmt.Errorf("loss: unknown loss %q (want softmax, cosface, arcface, triplet, irene or distill)", c.Kind)
}

type softmaxHead struct {
	fc    *nn.Dense
	irene bool
	alpha float64
}

func (h *softmaxHead) Logits(s *nn.Scope, emb *Node) *Node { return h.fc.Apply(s, emb) }
func (h *softmaxHead) Coupled() bool                       { return false }
func (h *softmaxHead) AuxProb() float64 {
	if h.irene {
		return 1 - h.alpha
	}
	return 0
}

func (h *softmaxHead) Apply(s *nn.Scope, emb *Node, b Batch) Result {
	logits := h.fc.Apply(s, emb)
	var l *Node
	if h.irene {
		l = Irene(logits, b.Labels, b.Aux, h.alpha)
	} else {
		l = CrossEntropy(logits, b.Labels)
	}
	return Result{Loss: graph.Mul(l, b.Mask), Weight: b.Mask}
}

type marginHead struct {
	cls     *nn.CosineClassifier
	arc     bool
	s, m    float64
	rho     float64
	centres *tensors.Tensor
}

func (h *marginHead) Logits(s *nn.Scope, emb *Node) *Node { return h.cls.Apply(s, emb) }
func (h *marginHead) Coupled() bool                       { return false }
func (h *marginHead) AuxProb() float64                    { return 0 }

func (h *marginHead) Apply(s *nn.Scope, emb *Node, b Batch) Result {
	cos := h.cls.Apply(s, emb)
	logits := MarginLogits(cos, b.Labels, h.arc, h.s, h.m)
	if h.centres != nil {
		p := graph.ConvertDType(graph.Const(emb.Graph(), h.centres), emb.DType())
		logits = graph.Concatenate([]*Node{logits, ConsensusLogits(emb, p, h.s, h.rho)}, 1)
	}
	return Result{Loss: graph.Mul(CrossEntropy(logits, b.Labels), b.Mask), Weight: b.Mask}
}

type tripletHead struct {
	alpha float64
	semi  bool
}

func (h *tripletHead) Logits(*nn.Scope, *Node) *Node { return nil }
func (h *tripletHead) Coupled() bool                 { return true }
func (h *tripletHead) AuxProb() float64              { return 0 }
func (h *tripletHead) Apply(_ *nn.Scope, emb *Node, b Batch) Result {
	l, w := Triplet(emb, b.Labels, b.Mask, h.alpha, h.semi)
	return Result{Loss: l, Weight: w}
}

// CrossEntropy is −log softmax(logits)[label] per example: logits [B,N],
// labels [B] integers → [B].
func CrossEntropy(logits, labels *Node) *Node {
	n := logits.Shape().Dimensions[1]
	oh := graph.OneHot(labels, n, logits.DType())
	return graph.Neg(graph.ReduceSum(graph.Mul(oh, graph.LogSoftmax(logits, 1)), 1))
}

// MarginLogits applies the CosFace (s·(cosθ − m)) or ArcFace (s·cos(θ+m))
// margin to the target class's cosine and scales the others by s. ArcFace
// uses the usual monotone continuation cosθ − m·sin m when θ+m > π.
func MarginLogits(cos, labels *Node, arc bool, s, m float64) *Node {
	n := cos.Shape().Dimensions[1]
	oh := graph.OneHot(labels, n, cos.DType())
	var target *Node
	if arc {
		c := graph.ClipScalar(cos, -1+1e-7, 1-1e-7)
		sin := graph.Sqrt(graph.OneMinus(graph.Square(c)))
		phi := graph.Sub(graph.MulScalar(c, math.Cos(m)), graph.MulScalar(sin, math.Sin(m)))
		alt := graph.AddScalar(c, -m*math.Sin(m))
		target = graph.Where(graph.GreaterThan(c, graph.Scalar(c.Graph(), c.DType(), math.Cos(math.Pi-m))), phi, alt)
	} else {
		target = graph.AddScalar(cos, -m)
	}
	return graph.MulScalar(graph.Add(cos, graph.Mul(oh, graph.Sub(target, cos))), s)
}

// ConsensusLogits are PrivacyFace's extra negatives (Eq. 5): for
// embeddings f [B,D] and cluster centres p [Q,D] (both normalised here),
// μ = s·cos(max(θ − ρ, 0)) with θ the angle between f and p → [B,Q].
func ConsensusLogits(f, p *Node, s, rho float64) *Node {
	f = nn.L2Normalize(f)
	p = nn.L2Normalize(p)
	c := graph.ClipScalar(graph.Dot(f, graph.Transpose(p, 0, 1)).Product(), -1+1e-7, 1-1e-7)
	sin := graph.Sqrt(graph.OneMinus(graph.Square(c)))
	shifted := graph.Add(graph.MulScalar(c, math.Cos(rho)), graph.MulScalar(sin, math.Sin(rho)))
	inside := graph.GreaterOrEqual(c, graph.Scalar(c.Graph(), c.DType(), math.Cos(rho)))
	return graph.MulScalar(graph.Where(inside, graph.OnesLike(c), shifted), s)
}

// Irene is the negative of Eq. 2 of Irene with its E-step: each example's
// tag t is replaced by the model's current prediction where flip is 1
// (drawn with probability 1−α), then
// loss = −α·log q_t̃ − (1−α)·log max_i q_i.
func Irene(logits, labels, flip *Node, alpha float64) *Node {
	n := logits.Shape().Dimensions[1]
	lq := graph.LogSoftmax(logits, 1)
	t := graph.ConvertDType(labels, logits.DType())
	if flip != nil {
		pred := graph.StopGradient(graph.ConvertDType(graph.ArgMax(logits, 1), logits.DType()))
		t = graph.Add(graph.Mul(flip, pred), graph.Mul(graph.OneMinus(flip), t))
	}
	oh := graph.OneHot(graph.ConvertDType(t, labels.DType()), n, logits.DType())
	ce := graph.Neg(graph.ReduceSum(graph.Mul(oh, lq), 1))
	minEnt := graph.Neg(graph.ReduceMax(lq, 1))
	return graph.Add(graph.MulScalar(ce, alpha), graph.MulScalar(minEnt, 1-alpha))
}

// Triplet is the triplet loss of LightFace/FaceNet with online mining:
// every positive pair (a, p) of valid examples in the batch, with the
// hardest negative of a (smallest ‖f_a − f_n‖²) or, if semiHard, the
// hardest negative farther than the positive (falling back to the farthest
// negative when none is). It returns, per anchor, the sum of
// [d(a,p) − d(a,n) + α]₊ over its positives and the number of positives.
func Triplet(f, labels, mask *Node, alpha float64, semiHard bool) (loss, weight *Node) {
	g := f.Graph()
	dt := f.DType()
	b := f.Shape().Dimensions[0]
	sq := graph.ReduceSum(graph.Square(f), 1)
	dot := graph.Dot(f, graph.Transpose(f, 0, 1)).Product()
	d := graph.MaxScalar(graph.Sub(graph.Add(graph.Reshape(sq, b, 1), graph.Reshape(sq, 1, b)), graph.MulScalar(dot, 2)), 0.0)
	li := graph.Reshape(labels, b, 1)
	lj := graph.Reshape(labels, 1, b)
	valid := graph.Mul(graph.Reshape(mask, b, 1), graph.Reshape(mask, 1, b))
	eye := graph.ConvertDType(graph.Equal(graph.Iota(g, shapes.Make(dt, b, b), 0), graph.Iota(g, shapes.Make(dt, b, b), 1)), dt)
	same := graph.ConvertDType(graph.Equal(li, lj), dt)
	pos := graph.Mul(graph.Mul(same, graph.OneMinus(eye)), valid)
	neg := graph.Mul(graph.OneMinus(same), valid)
	const big = 1e4
	hasNeg := graph.MinScalar(graph.ReduceSum(neg, 1), 1.0) // [B]
	var dn *Node                                            // [B(a), B(p)]
	if !semiHard {
		dmin := graph.ReduceMin(graph.Add(d, graph.MulScalar(graph.OneMinus(neg), big)), 1)
		dn = graph.BroadcastToDims(graph.Reshape(dmin, b, 1), b, b)
	} else {
		dap := graph.Reshape(d, b, b, 1)                                                   // [a,p,1]
		dan := graph.Reshape(d, b, 1, b)                                                   // [a,1,n]
		farther := graph.ConvertDType(graph.GreaterThan(dan, graph.StopGradient(dap)), dt) // [a,p,n]
		cand := graph.Mul(farther, graph.Reshape(neg, b, 1, b))
		semi := graph.ReduceMin(graph.Add(graph.BroadcastToDims(dan, b, b, b), graph.MulScalar(graph.OneMinus(cand), big)), 2)
		has := graph.GreaterThan(graph.ReduceMax(cand, 2), graph.ScalarZero(g, dt))
		dmax := graph.ReduceMax(graph.Sub(d, graph.MulScalar(graph.OneMinus(neg), big)), 1)
		dn = graph.Where(has, semi, graph.BroadcastToDims(graph.Reshape(dmax, b, 1), b, b))
	}
	hinge := graph.MaxScalar(graph.AddScalar(graph.Sub(d, dn), alpha), 0.0)
	loss = graph.Mul(graph.ReduceSum(graph.Mul(hinge, pos), 1), hasNeg)
	weight = graph.Mul(graph.ReduceSum(pos, 1), hasNeg)
	return loss, weight
}
