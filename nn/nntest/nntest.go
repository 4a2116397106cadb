// Package nntest checks the gradients of nn layers and losses in tests:
// analytic gradients against central finite differences (in float64), and
// per-example gradients (expanded weights) against the batched gradient.
package nntest

import (
	"fmt"
	"github.com/gomlx/compute"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn"
)

// Case is a function of parameters and inputs to check. Build returns a
// tensor whose first axis is the example axis; the checked objective is
// Σ out·R for a fixed random R of the same shape.
type Case struct {
	// Params are the parameters (values taken as initialised).
	Params *nn.Params
	// Inputs are the extra inputs; float64 ones listed in Diff are
	// differentiated too. Every input has the example axis first.
	Inputs []*tensors.Tensor
	Diff   []bool
	// Training selects batch statistics in normalisation layers.
	Training bool
	// Build computes the output from the scope and the input nodes.
	Build func(s *nn.Scope, in []*graph.Node) *graph.Node
}

func f64(p *nn.Params, i int) *tensors.Tensor {
	v := p.Values(i)
	d := make([]float64, len(v))
	for j, x := range v {
		d[j] = float64(x)
	}
	return tensors.FromFlatDataAndDimensions(d, p.Spec(i).Shape...)
}

func flat(t *tensors.Tensor) []float64 { return tensors.MustCopyFlatData[float64](t) }

// args assembles params (as float64) then inputs then R.
func (c Case) args(params []*tensors.Tensor, inputs []*tensors.Tensor, r *tensors.Tensor) []any {
	var a []any
	for _, t := range params {
		a = append(a, t)
	}
	for _, t := range inputs {
		a = append(a, t)
	}
	return append(a, r)
}

// objective builds Σ out·R and returns it with the scope's expanded nodes.
func (c Case) objective(in []*graph.Node, perExample bool) (*graph.Node, []*graph.Node, *graph.Node) {
	np := c.Params.Len()
	pn, xs, r := in[:np], in[np:len(in)-1], in[len(in)-1]
	var s *nn.Scope
	var exp []*graph.Node
	var err error
	if perExample {
		s, exp, err = nn.ExpandedScope(c.Params, pn, xs[0].Shape().Dimensions[0], func(int) bool { return true }, c.Training)
	} else {
		s, err = nn.NewScope(c.Params, pn, nil, c.Training)
	}
	if err != nil {
		panic(err)
	}
	out := c.Build(s, xs)
	return graph.ReduceAllSum(graph.Mul(out, r)), exp, out
}

func (c Case) newR(t testing.TB, e compute.Backend) *tensors.Tensor {
	t.Helper()
	params := make([]*tensors.Tensor, c.Params.Len())
	for i := range params {
		params[i] = f64(c.Params, i)
	}
	ex, err := graph.NewExec(e, func(in []*graph.Node) *graph.Node {
		np := c.Params.Len()
		s, err := nn.NewScope(c.Params, in[:np], nil, c.Training)
		if err != nil {
			panic(err)
		}
		return c.Build(s, in[np:])
	})
	if err != nil {
		t.Fatal(err)
	}
	var a []any
	for _, p := range params {
		a = append(a, p)
	}
	for _, x := range c.Inputs {
		a = append(a, x)
	}
	out, err := ex.Call(a...)
	if err != nil {
		t.Fatalf("forward: %v", err)
	}
	sh := out[0].Shape()
	rng := rand.New(rand.NewPCG(7, 7))
	d := make([]float64, sh.Size())
	for i := range d {
		d[i] = rng.NormFloat64()
	}
	return tensors.FromFlatDataAndDimensions(d, sh.Dimensions...)
}

// CheckGradients compares analytic and finite-difference gradients of the
// objective with respect to every non-state parameter and every input
// marked in Diff, at up to 8 coordinates per tensor.
func CheckGradients(t *testing.T, c Case) {
	t.Helper()
	e := backend(t)
	c.Inputs = localClones(t, c.Inputs)
	r := c.newR(t, e)
	params := make([]*tensors.Tensor, c.Params.Len())
	for i := range params {
		params[i] = f64(c.Params, i)
	}
	np := len(params)
	// Which tensors to check: trainable params, then differentiable inputs.
	var targets []int // index into the flat argument list
	for i := 0; i < np; i++ {
		if !c.Params.Spec(i).State {
			targets = append(targets, i)
		}
	}
	for j := range c.Inputs {
		if j < len(c.Diff) && c.Diff[j] {
			targets = append(targets, np+j)
		}
	}
	gradEx, err := graph.NewExec(e, func(in []*graph.Node) []*graph.Node {
		obj, _, _ := c.objective(in, false)
		var nodes []*graph.Node
		for _, k := range targets {
			nodes = append(nodes, in[k])
		}
		return append([]*graph.Node{obj}, graph.Gradient(obj, nodes...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	fwdEx, err := graph.NewExec(e, func(in []*graph.Node) *graph.Node {
		obj, _, _ := c.objective(in, false)
		return obj
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := gradEx.Call(c.args(params, c.Inputs, r)...)
	if err != nil {
		t.Fatalf("gradient: %v", err)
	}
	all := append(append([]*tensors.Tensor{}, params...), c.Inputs...)
	eval := func(k, coord int, delta float64) float64 {
		d := flat(all[k])
		d[coord] += delta
		mod := append([]*tensors.Tensor{}, all...)
		mod[k] = tensors.FromFlatDataAndDimensions(d, all[k].Shape().Dimensions...)
		o, err := fwdEx.Call(c.args(mod[:np], mod[np:], r)...)
		if err != nil {
			t.Fatalf("forward: %v", err)
		}
		return flat(o[0])[0]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const h = 1e-6
	for ti, k := range targets {
		g := flat(out[1+ti])
		n := len(g)
		coords := rng.Perm(n)
		if len(coords) > 8 {
			coords = coords[:8]
		}
		name := fmt.Sprintf("input %d", k-np)
		if k < np {
			name = c.Params.Spec(k).Name
		}
		for _, j := range coords {
			num := (eval(k, j, h) - eval(k, j, -h)) / (2 * h)
			if math.Abs(num-g[j]) > 1e-5+1e-3*math.Max(math.Abs(num), math.Abs(g[j])) {
				t.Errorf("%s[%d]: analytic gradient %.8g, finite difference %.8g", name, j, g[j], num)
			}
		}
	}
}

// CheckPerExample checks that the per-example gradients obtained with
// expanded weights sum to the batched gradient, and, when separable (the
// output of example b depends only on example b), that example b's
// gradient equals the gradient computed on example b alone.
func CheckPerExample(t *testing.T, c Case, separable bool) {
	t.Helper()
	e := backend(t)
	c.Inputs = localClones(t, c.Inputs)
	r := c.newR(t, e)
	params := make([]*tensors.Tensor, c.Params.Len())
	for i := range params {
		params[i] = f64(c.Params, i)
	}
	np := len(params)
	var trainable []int
	for i := 0; i < np; i++ {
		if !c.Params.Spec(i).State {
			trainable = append(trainable, i)
		}
	}
	batchedEx, err := graph.NewExec(e, func(in []*graph.Node) []*graph.Node {
		obj, _, _ := c.objective(in, false)
		var nodes []*graph.Node
		for _, k := range trainable {
			nodes = append(nodes, in[k])
		}
		return graph.Gradient(obj, nodes...)
	})
	if err != nil {
		t.Fatal(err)
	}
	perEx, err := graph.NewExec(e, func(in []*graph.Node) []*graph.Node {
		obj, exp, _ := c.objective(in, true)
		var nodes []*graph.Node
		for _, k := range trainable {
			nodes = append(nodes, exp[k])
		}
		return graph.Gradient(obj, nodes...)
	})
	if err != nil {
		t.Fatal(err)
	}
	bg, err := batchedEx.Call(c.args(params, c.Inputs, r)...)
	if err != nil {
		t.Fatalf("batched gradient: %v", err)
	}
	pg, err := perEx.Call(c.args(params, c.Inputs, r)...)
	if err != nil {
		t.Fatalf("per-example gradient: %v", err)
	}
	batch := c.Inputs[0].Shape().Dimensions[0]
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9+1e-6*math.Max(math.Abs(a), math.Abs(b)) }
	for ti, k := range trainable {
		want := flat(bg[ti])
		got := flat(pg[ti])
		if len(got) != batch*len(want) {
			t.Fatalf("%s: per-example gradient has %d values, want %d×%d", c.Params.Spec(k).Name, len(got), batch, len(want))
		}
		for j := range want {
			s := 0.0
			for b := 0; b < batch; b++ {
				s += got[b*len(want)+j]
			}
			if !close(s, want[j]) {
				t.Errorf("%s[%d]: sum of per-example gradients %.10g, batched gradient %.10g", c.Params.Spec(k).Name, j, s, want[j])
				break
			}
		}
	}
	if !separable {
		return
	}
	// Example b alone.
	b := batch - 1
	slice := func(x *tensors.Tensor) *tensors.Tensor {
		sh := x.Shape()
		per := sh.Size() / sh.Dimensions[0]
		dims := append([]int{1}, sh.Dimensions[1:]...)
		var out *tensors.Tensor
		tensors.MustConstFlatData(x, func(d []float64) {
			out = tensors.FromFlatDataAndDimensions(append([]float64{}, d[b*per:(b+1)*per]...), dims...)
		})
		return out
	}
	var ins []*tensors.Tensor
	for _, x := range c.Inputs {
		if x.DType().String() == "Float64" {
			ins = append(ins, slice(x))
			continue
		}
		// Integer inputs (labels): slice through int32.
		sh := x.Shape()
		per := sh.Size() / sh.Dimensions[0]
		d := tensors.MustCopyFlatData[int32](x)
		ins = append(ins, tensors.FromFlatDataAndDimensions(append([]int32{}, d[b*per:(b+1)*per]...), append([]int{1}, sh.Dimensions[1:]...)...))
	}
	single, err := batchedEx.Call(c.args(params, ins, slice(r))...)
	if err != nil {
		t.Fatalf("single-example gradient: %v", err)
	}
	for ti, k := range trainable {
		want := flat(single[ti])
		got := flat(pg[ti])[b*len(want) : (b+1)*len(want)]
		for j := range want {
			if !close(got[j], want[j]) {
				t.Errorf("%s[%d]: example %d's gradient %.10g, gradient on it alone %.10g", c.Params.Spec(k).Name, j, b, got[j], want[j])
				break
			}
		}
	}
}

// Random returns a float64 tensor of standard normal values.
func Random(seed uint64, dims ...int) *tensors.Tensor {
	rng := rand.New(rand.NewPCG(seed, 3))
	n := 1
	for _, d := range dims {
		n *= d
	}
	d := make([]float64, n)
	for i := range d {
		d[i] = rng.NormFloat64()
	}
	return tensors.FromFlatDataAndDimensions(d, dims...)
}

// backend returns the backend of a new default engine: each check runs on
// an engine of its own, so no state is shared between tests. A tensor is
// bound to the backend it first ran on, so a check runs on its own copies
// of the case's inputs (see localClones).
func backend(t testing.TB) compute.Backend {
	t.Helper()
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return eng.Backend()
}

// localClones returns unbound copies of xs.
func localClones(t testing.TB, xs []*tensors.Tensor) []*tensors.Tensor {
	t.Helper()
	out := make([]*tensors.Tensor, len(xs))
	for i, x := range xs {
		c, err := x.LocalClone()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c
	}
	return out
}
