package collab

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/core/graph"

	"github.com/veil-privacy/veil/nn"
)

// PsiOptions configures ψ.
type PsiOptions struct {
	// Dim is the input's size (default 128).
	Dim int
	// Out is ψ's output size; 0 or Dim makes ψ residual (x + r(x),
	// starting at the identity). Another size makes ψ a head on public
	// features (the papers' setting): ψ(x) = r(x)/‖r(x)‖, its layers
	// randomly initialised (a random projection at the start), as the
	// federation's head on the age/gender features (nn/arch, with ReLU
	// for PReLU); ψ has then no library model file (Model refuses it).
	Out int
	// Hidden is the hidden width of r's MLP; 0 makes r linear.
	Hidden int
	// Seed seeds the initial weights of r's first layer (not privacy noise).
	Seed uint64
}

// Psi is ψ(x) = x + r(x): r is W·x + b (linear), or W₂·ReLU(W₁·x + b₁) + b₂
// (MLP); r's last layer starts at zero, so ψ starts as the identity.
type Psi struct {
	o      PsiOptions
	params *nn.Params
	layers []*nn.Dense
	names  [][2]string // per layer: weight and bias names
}

// Parameter names of ψ's layers.
const (
	psiFC1 = "psi/fc1"
	psiFC2 = "psi/fc2"
)

// NewPsi returns ψ at the identity.
func NewPsi(o PsiOptions) (*Psi, error) {
	if o.Dim == 0 {
		o.Dim = 128
	}
	if o.Out == 0 {
		o.Out = o.Dim
	}
	if o.Dim < 1 || o.Hidden < 0 || o.Out < 1 {
		return nil, fmt.Errorf("collab: ψ needs positive input and output sizes and a hidden width ≥ 0, got %d, %d and %d", o.Dim, o.Out, o.Hidden)
	}
	p := nn.NewParams()
	ψ := &Psi{o: o, params: p}
	add := func(name string, in, out int) error {
		d, err := nn.NewDense(p, name, in, out, true)
		if err != nil {
			return err
		}
		ψ.layers = append(ψ.layers, d)
		ψ.names = append(ψ.names, [2]string{name + "/w", name + "/b"})
		return nil
	}
	if o.Hidden == 0 {
		if err := add(psiFC1, o.Dim, o.Out); err != nil {
			return nil, err
		}
	} else {
		if err := add(psiFC1, o.Dim, o.Hidden); err != nil {
			return nil, err
		}
		if err := add(psiFC2, o.Hidden, o.Out); err != nil {
			return nil, err
		}
	}
	p.Init(o.Seed)
	if !ψ.Residual() {
		return ψ, nil
	}
	last := ψ.names[len(ψ.names)-1]
	for _, n := range last {
		i, _ := p.Index(n)
		clear(p.Values(i))
	}
	return ψ, nil
}

// Residual says whether ψ is x + r(x) (output size = input size).
func (ψ *Psi) Residual() bool { return ψ.o.Out == ψ.o.Dim }

// Options returns ψ's options, defaults filled in.
func (ψ *Psi) Options() PsiOptions { return ψ.o }

// Params are ψ's parameters (nn/train's Model).
func (ψ *Psi) Params() *nn.Params { return ψ.params }

// InputDims is [Dim] (nn/train's Model).
func (ψ *Psi) InputDims() []int { return []int{ψ.o.Dim} }

// UsesBatchNorm is false: ψ is safe under DP-SGD (nn/train's Model).
func (ψ *Psi) UsesBatchNorm() bool { return false }

// Embed builds ψ on a batch x [B, Dim] (nn/train's Model). The output is
// not normalised, so the identity is exact.
func (ψ *Psi) Embed(s *nn.Scope, x *graph.Node) *graph.Node {
	y := ψ.layers[0].Apply(s, x)
	if len(ψ.layers) == 2 {
		y = ψ.layers[1].Apply(s, nn.ReLU(y))
	}
	if !ψ.Residual() {
		return nn.L2Normalize(y)
	}
	return graph.Add(x, y)
}

// Weights returns a copy of ψ's parameters by name.
func (ψ *Psi) Weights() map[string][]float32 {
	out := map[string][]float32{}
	for _, l := range ψ.names {
		for _, n := range l {
			i, _ := ψ.params.Index(n)
			out[n] = slices.Clone(ψ.params.Values(i))
		}
	}
	return out
}

// SetWeights replaces ψ's parameters (every one, of the right sizes).
func (ψ *Psi) SetWeights(w map[string][]float32) error {
	for _, l := range ψ.names {
		for _, n := range l {
			i, _ := ψ.params.Index(n)
			v, ok := w[n]
			if !ok || len(v) != len(ψ.params.Values(i)) {
				return fmt.Errorf("collab: ψ weight %q missing or of the wrong size", n)
			}
		}
	}
	for _, l := range ψ.names {
		for _, n := range l {
			i, _ := ψ.params.Index(n)
			copy(ψ.params.Values(i), w[n])
		}
	}
	return nil
}

// Apply computes ψ(x) in Go (float64 sums, package tagging/psimodel's
// Apply on ψ's weights), for a library to map its descriptors without the
// engine. It fails when x has the wrong size or ψ(x) is not finite.
func (ψ *Psi) Apply(x []float32) ([]float32, error) {
	if !ψ.Residual() {
		return ψ.applyHead(x)
	}
	y, err := ψ.view().Apply(x)
	if err != nil {
		return nil, fmt.Errorf("collab: %w", err)
	}
	return y, nil
}

// ApplyAll maps every descriptor.
func (ψ *Psi) ApplyAll(xs [][]float32) ([][]float32, error) {
	if ψ == nil {
		return nil, errors.New("collab: no ψ")
	}
	out := make([][]float32, len(xs))
	for i, x := range xs {
		y, err := ψ.Apply(x)
		if err != nil {
			return nil, err
		}
		out[i] = y
	}
	return out, nil
}

// applyHead computes a non-residual ψ(x) = r(x) in Go (float64 sums,
// ReLU between the layers), as psimodel.Model.Apply does for residual ones.
func (ψ *Psi) applyHead(x []float32) ([]float32, error) {
	if len(x) != ψ.o.Dim {
		return nil, fmt.Errorf("collab: ψ input of %d values, want %d", len(x), ψ.o.Dim)
	}
	in := x
	for li, l := range ψ.names {
		wi, _ := ψ.params.Index(l[0])
		bi, _ := ψ.params.Index(l[1])
		w, b := ψ.params.Values(wi), ψ.params.Values(bi)
		out := make([]float64, len(b))
		for o := range out {
			out[o] = float64(b[o])
		}
		for i, v := range in {
			if v == 0 {
				continue
			}
			row := w[i*len(b) : (i+1)*len(b)]
			for o, wv := range row {
				out[o] += float64(v) * float64(wv)
			}
		}
		y := make([]float32, len(out))
		for o, v := range out {
			if li < len(ψ.names)-1 && v < 0 {
				v = 0
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, errors.New("collab: ψ(x) is not finite")
			}
			y[o] = float32(v)
		}
		in = y
	}
	var n float64
	for _, v := range in {
		n += float64(v) * float64(v)
	}
	if n == 0 {
		return nil, errors.New("collab: ψ(x) is zero")
	}
	n = 1 / math.Sqrt(n)
	for i := range in {
		in[i] = float32(float64(in[i]) * n)
	}
	return in, nil
}
