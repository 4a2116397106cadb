package nn_test

import (
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/nntest"
)

type layerCase struct {
	name      string
	x         *tensors.Tensor
	training  bool
	separable bool
	build     func(p *nn.Params) (func(s *nn.Scope, x *graph.Node) *graph.Node, error)
}

func layerCases() []layerCase {
	img := nntest.Random(11, 3, 5, 5, 4)
	return []layerCase{
		{name: "dense", x: nntest.Random(1, 3, 4), separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			d, err := nn.NewDense(p, "d", 4, 3, true)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return d.Apply(s, x) }, err
		}},
		{name: "conv3x3 stride 1", x: img, separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewConv(p, "c", 3, 1, 4, 3, true)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "conv3x3 stride 2", x: img, separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewConv(p, "c", 3, 2, 4, 2, false)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "pointwise", x: img, separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewConv(p, "c", 1, 1, 4, 5, false)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "depthwise stride 2", x: img, separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewDepthwise(p, "dw", 3, 2, 4)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "squeeze-excite", x: nntest.Random(12, 2, 3, 3, 16), separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewSqueezeExcite(p, "we", 16, 8)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "group norm", x: img, separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewGroupNorm(p, "gn", 4, 2)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "batch norm training", x: img, training: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewBatchNorm(p, "bn", 4)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "prelu", x: img, separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewPReLU(p, "a", 4)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "cosine classifier", x: nntest.Random(13, 3, 4), separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewCosineClassifier(p, "cls", 4, 5)
			return func(s *nn.Scope, x *graph.Node) *graph.Node { return c.Apply(s, x) }, err
		}},
		{name: "relu maxpool l2norm after conv", x: img, separable: true, build: func(p *nn.Params) (func(*nn.Scope, *graph.Node) *graph.Node, error) {
			c, err := nn.NewConv(p, "c", 3, 1, 4, 3, true)
			return func(s *nn.Scope, x *graph.Node) *graph.Node {
				y := nn.MaxPool(nn.ReLU(c.Apply(s, x)), 2, 2)
				return nn.L2Normalize(nn.GlobalAvgPool(y))
			}, err
		}},
	}
}

func TestLayerGradients(t *testing.T) {
	for _, lc := range layerCases() {
		t.Run(lc.name, func(t *testing.T) {
			p := nn.NewParams()
			f, err := lc.build(p)
			if err != nil {
				t.Fatal(err)
			}
			p.Init(5)
			// Perturb one-valued scales so their gradients are not special.
			for i := 0; i < p.Len(); i++ {
				for j, v := range p.Values(i) {
					p.Values(i)[j] = v + 0.1*float32(j%3)
				}
			}
			c := nntest.Case{Params: p, Inputs: []*tensors.Tensor{lc.x}, Diff: []bool{true}, Training: lc.training,
				Build: func(s *nn.Scope, in []*graph.Node) *graph.Node { return f(s, in[0]) }}
			nntest.CheckGradients(t, c)
			if !lc.training {
				nntest.CheckPerExample(t, c, lc.separable)
			}
		})
	}
}

func TestDeclareErrors(t *testing.T) {
	p := nn.NewParams()
	if _, err := nn.NewDense(p, "d", 2, 2, false); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		make func() error
	}{
		{"duplicate", func() error { _, err := nn.NewDense(p, "d", 2, 2, false); return err }},
		{"zero width", func() error { _, err := nn.NewConv(p, "c", 3, 1, 0, 2, false); return err }},
		{"groups", func() error { _, err := nn.NewGroupNorm(p, "g", 6, 4); return err }},
		{"eta too big", func() error { _, err := nn.NewSqueezeExcite(p, "s", 4, 8); return err }},
	}
	for _, tc := range tests {
		if err := tc.make(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
