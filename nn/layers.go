package nn

import (
	"fmt"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// Node is a GoMLX graph node.
type Node = graph.Node

// Dense is a fully connected layer y = x·W + b on [B, In] inputs.
type Dense struct {
	name    string
	in, out int
	bias    bool
}

// NewDense declares name/w [in,out] (and name/b [out] if bias).
func NewDense(p *Params, name string, in, out int, bias bool) (*Dense, error) {
	if in <= 0 || out <= 0 {
		return nil, fmt.Errorf("nn: dense %q needs positive sizes, got %d→%d", name, in, out)
	}
	if err := p.Declare(ParamSpec{Name: name + "/w", Shape: []int{in, out}, Init: InitXavier, FanIn: in, Ghost: true}); err != nil {
		return nil, err
	}
	if bias {
		if err := p.Declare(ParamSpec{Name: name + "/b", Shape: []int{out}, Init: InitZeros, Ghost: true}); err != nil {
			return nil, err
		}
	}
	return &Dense{name: name, in: in, out: out, bias: bias}, nil
}

// Apply maps x [B, In] to [B, Out].
func (d *Dense) Apply(s *Scope, x *Node) *Node {
	w, exp := s.W(d.name + "/w")
	var y *Node
	if exp {
		y = graph.Einsum("bi,bio->bo", x, w)
	} else {
		y = graph.Dot(x, w).Product()
	}
	b := ""
	if d.bias {
		b = d.name + "/b"
		y = graph.Add(y, s.channelWeight(b, y))
	}
	s.recordDense(d.name+"/w", b, x, y)
	return y
}

// SamePadding returns the output size and the (low, high) zero padding of
// TensorFlow's "SAME" convolution along one axis.
func SamePadding(in, k, stride int) (out, lo, hi int) {
	out = (in + stride - 1) / stride
	total := max((out-1)*stride+k-in, 0)
	return out, total / 2, total - total/2
}

// padHW zero-pads the two spatial axes of x [B,H,W,C] by concatenation
// (graph.Pad has no gradient in this GoMLX version).
func padHW(x *Node, top, bottom, left, right int) *Node {
	d := x.Shape().Dimensions
	parts := []*Node{}
	if top > 0 {
		parts = append(parts, graph.Zeros(x.Graph(), shapes.Make(x.DType(), d[0], top, d[2], d[3])))
	}
	parts = append(parts, x)
	if bottom > 0 {
		parts = append(parts, graph.Zeros(x.Graph(), shapes.Make(x.DType(), d[0], bottom, d[2], d[3])))
	}
	if len(parts) > 1 {
		x = graph.Concatenate(parts, 1)
	}
	d = x.Shape().Dimensions
	parts = parts[:0]
	if left > 0 {
		parts = append(parts, graph.Zeros(x.Graph(), shapes.Make(x.DType(), d[0], d[1], left, d[3])))
	}
	parts = append(parts, x)
	if right > 0 {
		parts = append(parts, graph.Zeros(x.Graph(), shapes.Make(x.DType(), d[0], d[1], right, d[3])))
	}
	if len(parts) > 1 {
		x = graph.Concatenate(parts, 2)
	}
	return x
}

// shifted returns the k·k strided windows of x [B,H,W,C] padded "SAME":
// window (dy,dx) is x_pad[:, dy + stride·i, dx + stride·j, :].
func shifted(x *Node, k, stride int) (wins []*Node, ho, wo int) {
	d := x.Shape().Dimensions
	ho, t, b := SamePadding(d[1], k, stride)
	wo, l, r := SamePadding(d[2], k, stride)
	x = padHW(x, t, b, l, r)
	for dy := 0; dy < k; dy++ {
		for dx := 0; dx < k; dx++ {
			wins = append(wins, graph.Slice(x, graph.AxisRange(),
				graph.AxisRange(dy, dy+(ho-1)*stride+1).Stride(stride),
				graph.AxisRange(dx, dx+(wo-1)*stride+1).Stride(stride),
				graph.AxisRange()))
		}
	}
	return wins, ho, wo
}

// Conv is a k×k convolution with "SAME" padding on NHWC inputs, lowered to
// im2col (strided slices concatenated on the channel axis) and one matrix
// product, which is about 13× faster than graph.Convolve on the pure-Go
// backend and works with per-example weights (a batched product).
type Conv struct {
	name              string
	k, stride, cin, c int
	bias              bool
}

// NewConv declares name/w [k,k,cin,cout] (and name/b [cout] if bias).
func NewConv(p *Params, name string, k, stride, cin, cout int, bias bool) (*Conv, error) {
	if k <= 0 || stride <= 0 || cin <= 0 || cout <= 0 {
		return nil, fmt.Errorf("nn: conv %q needs positive kernel %d, stride %d, channels %d→%d", name, k, stride, cin, cout)
	}
	if err := p.Declare(ParamSpec{Name: name + "/w", Shape: []int{k, k, cin, cout}, Init: InitHe, FanIn: k * k * cin}); err != nil {
		return nil, err
	}
	if bias {
		if err := p.Declare(ParamSpec{Name: name + "/b", Shape: []int{cout}, Init: InitZeros}); err != nil {
			return nil, err
		}
	}
	return &Conv{name: name, k: k, stride: stride, cin: cin, c: cout, bias: bias}, nil
}

// Apply maps x [B,H,W,Cin] to [B,Ho,Wo,Cout].
func (c *Conv) Apply(s *Scope, x *Node) *Node {
	w, exp := s.W(c.name + "/w")
	bsz := x.Shape().Dimensions[0]
	var cols *Node
	var ho, wo int
	if c.k == 1 && c.stride == 1 {
		cols, ho, wo = x, x.Shape().Dimensions[1], x.Shape().Dimensions[2]
	} else {
		var wins []*Node
		wins, ho, wo = shifted(x, c.k, c.stride)
		cols = graph.Concatenate(wins, 3)
	}
	kk := c.k * c.k * c.cin
	var y *Node
	if exp {
		y = graph.Einsum("bpk,bko->bpo", graph.Reshape(cols, bsz, ho*wo, kk), graph.Reshape(w, bsz, kk, c.c))
	} else {
		y = graph.Dot(graph.Reshape(cols, bsz*ho*wo, kk), graph.Reshape(w, kk, c.c)).Product()
	}
	y = graph.Reshape(y, bsz, ho, wo, c.c)
	if c.bias {
		y = graph.Add(y, s.channelWeight(c.name+"/b", y))
	}
	return y
}

// Depthwise is a k×k depthwise convolution ("SAME" padding) written as a
// sum of k·k strided slices times per-channel weights, which has a correct
// gradient on this backend and expands per example cheaply.
type Depthwise struct {
	name         string
	k, stride, c int
}

// NewDepthwise declares name/w [k,k,c].
func NewDepthwise(p *Params, name string, k, stride, c int) (*Depthwise, error) {
	if k <= 0 || stride <= 0 || c <= 0 {
		return nil, fmt.Errorf("nn: depthwise %q needs positive kernel %d, stride %d, channels %d", name, k, stride, c)
	}
	if err := p.Declare(ParamSpec{Name: name + "/w", Shape: []int{k, k, c}, Init: InitHe, FanIn: k * k}); err != nil {
		return nil, err
	}
	return &Depthwise{name: name, k: k, stride: stride, c: c}, nil
}

// Apply maps x [B,H,W,C] to [B,Ho,Wo,C].
func (d *Depthwise) Apply(s *Scope, x *Node) *Node {
	w, exp := s.W(d.name + "/w")
	wins, _, _ := shifted(x, d.k, d.stride)
	var y *Node
	i := 0
	for dy := 0; dy < d.k; dy++ {
		for dx := 0; dx < d.k; dx++ {
			var wi *Node
			if exp {
				b := w.Shape().Dimensions[0]
				wi = graph.Reshape(graph.Slice(w, graph.AxisRange(), graph.AxisElem(dy), graph.AxisElem(dx), graph.AxisRange()), b, 1, 1, d.c)
			} else {
				wi = graph.Reshape(graph.Slice(w, graph.AxisElem(dy), graph.AxisElem(dx), graph.AxisRange()), 1, 1, 1, d.c)
			}
			t := graph.Mul(wins[i], wi)
			if y == nil {
				y = t
			} else {
				y = graph.Add(y, t)
			}
			i++
		}
	}
	return y
}

// SqueezeExcite is LightFace's weight-evaluation module (Table 1): global
// average pooling, FC to C/η with ReLU, FC back to C with a sigmoid, and a
// channel-wise rescaling of the input.
type SqueezeExcite struct {
	fc1, fc2 *Dense
}

// NewSqueezeExcite declares the two dense layers for c channels and
// reduction eta (LightFace uses η = 8).
func NewSqueezeExcite(p *Params, name string, c, eta int) (*SqueezeExcite, error) {
	if eta <= 0 || c/eta < 1 {
		return nil, fmt.Errorf("nn: weight evaluation %q: reduction η=%d does not fit %d channels", name, eta, c)
	}
	fc1, err := NewDense(p, name+"/fc1", c, c/eta, true)
	if err != nil {
		return nil, err
	}
	fc2, err := NewDense(p, name+"/fc2", c/eta, c, true)
	if err != nil {
		return nil, err
	}
	return &SqueezeExcite{fc1: fc1, fc2: fc2}, nil
}

// Apply rescales the channels of x [B,H,W,C].
func (se *SqueezeExcite) Apply(s *Scope, x *Node) *Node {
	d := x.Shape().Dimensions
	z := graph.ReduceMean(x, 1, 2)
	z = graph.Sigmoid(se.fc2.Apply(s, ReLU(se.fc1.Apply(s, z))))
	return graph.Mul(x, graph.Reshape(z, d[0], 1, 1, d[3]))
}

// ReLU is max(x, 0).
func ReLU(x *Node) *Node { return graph.MaxScalar(x, 0.0) }

// PReLU is max(x,0) + α·min(x,0) with a learnt slope α per channel.
type PReLU struct{ name string }

// NewPReLU declares name/alpha [c], initialised to 0.25.
func NewPReLU(p *Params, name string, c int) (*PReLU, error) {
	if err := p.Declare(ParamSpec{Name: name + "/alpha", Shape: []int{c}, Init: InitConst, Value: 0.25}); err != nil {
		return nil, err
	}
	return &PReLU{name: name}, nil
}

// Apply applies the activation on the last (channel) axis.
func (a *PReLU) Apply(s *Scope, x *Node) *Node {
	return graph.Add(graph.MaxScalar(x, 0.0), graph.Mul(s.channelWeight(a.name+"/alpha", x), graph.MinScalar(x, 0.0)))
}

// MaxPool takes the maximum over k×k windows with the given stride
// ("SAME" padding with zeros, which is exact after a ReLU).
func MaxPool(x *Node, k, stride int) *Node {
	wins, _, _ := shifted(x, k, stride)
	y := wins[0]
	for _, w := range wins[1:] {
		y = graph.Max(y, w)
	}
	return y
}

// GlobalAvgPool averages x [B,H,W,C] over its spatial axes to [B,C].
func GlobalAvgPool(x *Node) *Node { return graph.ReduceMean(x, 1, 2) }

// L2Normalize scales each row of x [B,D] to unit Euclidean norm.
func L2Normalize(x *Node) *Node {
	n := graph.ReduceAndKeep(graph.Square(x), graph.ReduceSum, -1)
	return graph.Mul(x, rsqrt(graph.AddScalar(n, 1e-12)))
}

// GroupNorm normalises each example over groups of channels (and the
// spatial axes), then applies a per-channel scale and shift. It does not
// mix examples, so it is the normalisation used under DP-SGD.
type GroupNorm struct {
	name      string
	c, groups int
	eps       float64
}

// NewGroupNorm declares name/gamma [c] (ones) and name/beta [c] (zeros).
func NewGroupNorm(p *Params, name string, c, groups int) (*GroupNorm, error) {
	if groups <= 0 || c%groups != 0 {
		return nil, fmt.Errorf("nn: group norm %q: %d channels not divisible into %d groups", name, c, groups)
	}
	if err := p.Declare(ParamSpec{Name: name + "/gamma", Shape: []int{c}, Init: InitOnes}); err != nil {
		return nil, err
	}
	if err := p.Declare(ParamSpec{Name: name + "/beta", Shape: []int{c}, Init: InitZeros}); err != nil {
		return nil, err
	}
	return &GroupNorm{name: name, c: c, groups: groups, eps: 1e-5}, nil
}

// Apply normalises x [B,...,C].
func (n *GroupNorm) Apply(s *Scope, x *Node) *Node {
	d := x.Shape().Dimensions
	gd := append(append([]int{}, d[:len(d)-1]...), n.groups, n.c/n.groups)
	xg := graph.Reshape(x, gd...)
	var axes []int
	for a := 1; a < len(gd); a++ {
		if a != len(gd)-2 {
			axes = append(axes, a)
		}
	}
	mean := graph.ReduceAndKeep(xg, graph.ReduceMean, axes...)
	xc := graph.Sub(xg, mean)
	v := graph.ReduceAndKeep(graph.Square(xc), graph.ReduceMean, axes...)
	y := graph.Reshape(graph.Mul(xc, rsqrt(graph.AddScalar(v, n.eps))), d...)
	return graph.Add(graph.Mul(y, s.channelWeight(n.name+"/gamma", y)), s.channelWeight(n.name+"/beta", y))
}

// BatchNorm normalises with batch statistics when training and running
// statistics at inference. It mixes examples, so it is refused under DP.
type BatchNorm struct {
	name     string
	c        int
	momentum float64
	eps      float64
}

// NewBatchNorm declares name/gamma, name/beta and the states name/mean and
// name/var, all [c].
func NewBatchNorm(p *Params, name string, c int) (*BatchNorm, error) {
	for _, sp := range []ParamSpec{
		{Name: name + "/gamma", Shape: []int{c}, Init: InitOnes},
		{Name: name + "/beta", Shape: []int{c}, Init: InitZeros},
		{Name: name + "/mean", Shape: []int{c}, Init: InitZeros, State: true},
		{Name: name + "/var", Shape: []int{c}, Init: InitOnes, State: true},
	} {
		if err := p.Declare(sp); err != nil {
			return nil, err
		}
	}
	return &BatchNorm{name: name, c: c, momentum: 0.9, eps: 1e-3}, nil
}

// Apply normalises x [B,...,C].
func (n *BatchNorm) Apply(s *Scope, x *Node) *Node {
	axes := make([]int, x.Rank()-1)
	for i := range axes {
		axes[i] = i
	}
	var mean, v *Node
	if s.Training() {
		mean = graph.ReduceAndKeep(x, graph.ReduceMean, axes...)
		v = graph.ReduceAndKeep(graph.Square(graph.Sub(x, mean)), graph.ReduceMean, axes...)
		oldM, _ := s.W(n.name + "/mean")
		oldV, _ := s.W(n.name + "/var")
		m := n.momentum
		s.SetState(n.name+"/mean", graph.Add(graph.MulScalar(oldM, m), graph.MulScalar(graph.StopGradient(graph.Reshape(mean, n.c)), 1-m)))
		s.SetState(n.name+"/var", graph.Add(graph.MulScalar(oldV, m), graph.MulScalar(graph.StopGradient(graph.Reshape(v, n.c)), 1-m)))
	} else {
		mean = s.channelWeight(n.name+"/mean", x)
		v = s.channelWeight(n.name+"/var", x)
	}
	y := graph.Mul(graph.Sub(x, mean), rsqrt(graph.AddScalar(v, n.eps)))
	return graph.Add(graph.Mul(y, s.channelWeight(n.name+"/gamma", y)), s.channelWeight(n.name+"/beta", y))
}

// CosineClassifier holds one weight vector per class and returns the cosine
// between each (normalised) embedding and each (normalised) class vector:
// the logits of CosFace, ArcFace and PrivacyFace before scale and margin.
type CosineClassifier struct {
	name string
	d, n int
}

// NewCosineClassifier declares name/w [d, n].
func NewCosineClassifier(p *Params, name string, d, n int) (*CosineClassifier, error) {
	if d <= 0 || n <= 0 {
		return nil, fmt.Errorf("nn: cosine classifier %q needs positive sizes, got d=%d classes=%d", name, d, n)
	}
	if err := p.Declare(ParamSpec{Name: name + "/w", Shape: []int{d, n}, Init: InitXavier, FanIn: d}); err != nil {
		return nil, err
	}
	return &CosineClassifier{name: name, d: d, n: n}, nil
}

// Apply maps embeddings f [B,D] to cosines [B,N].
func (c *CosineClassifier) Apply(s *Scope, f *Node) *Node {
	w, exp := s.W(c.name + "/w")
	f = L2Normalize(f)
	if exp {
		n := graph.ReduceAndKeep(graph.Square(w), graph.ReduceSum, 1)
		w = graph.Mul(w, rsqrt(graph.AddScalar(n, 1e-12)))
		return graph.Einsum("bd,bdn->bn", f, w)
	}
	n := graph.ReduceAndKeep(graph.Square(w), graph.ReduceSum, 0)
	w = graph.Mul(w, rsqrt(graph.AddScalar(n, 1e-12)))
	return graph.Dot(f, w).Product()
}

// rsqrt is 1/√x; graph.Rsqrt has no gradient in this GoMLX version.
func rsqrt(x *Node) *Node { return graph.Reciprocal(graph.Sqrt(x)) }
