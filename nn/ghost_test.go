package nn_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/nntest"
)

// ghostModel is conv → mean pool → dense (bias) → PReLU → dense (no bias)
// → L2 normalisation: expanded and ghost parameters in one network.
func ghostModel(t *testing.T) (*nn.Params, func(s *nn.Scope, x *graph.Node) *graph.Node) {
	t.Helper()
	p := nn.NewParams()
	c, err := nn.NewConv(p, "c", 3, 1, 2, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := nn.NewDense(p, "d1", 4, 6, true)
	if err != nil {
		t.Fatal(err)
	}
	act, err := nn.NewPReLU(p, "a", 6)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := nn.NewDense(p, "d2", 6, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	p.Init(3)
	return p, func(s *nn.Scope, x *graph.Node) *graph.Node {
		return nn.L2Normalize(d2.Apply(s, act.Apply(s, d1.Apply(s, nn.GlobalAvgPool(c.Apply(s, x))))))
	}
}

// TestGhostClippedSumsMatchExpanded computes DP-SGD's clipped gradient sum
// with every parameter expanded per example and with the dense layers'
// ghost norms: the per-example norms and the sums must agree, whether
// clipping binds for every example, for none (then the sum is the batched
// gradient of the unmasked examples) or for some.
func TestGhostClippedSumsMatchExpanded(t *testing.T) {
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := eng.Backend()
	const batch = 5
	x := nntest.Random(7, batch, 5, 5, 2)
	r := nntest.Random(8, batch, 3)
	mask := tensors.FromFlatDataAndDimensions([]float32{1, 1, 0, 1, 1}, batch)
	for _, clip := range []float64{1e-3, 1e6, 0.05} {
		p, f := ghostModel(t)
		var all []int
		for i := 0; i < p.Len(); i++ {
			all = append(all, i)
		}
		run := func(ghost bool) ([][]float32, []float32) {
			ex, err := graph.NewExec(be, func(in []*graph.Node) []*graph.Node {
				pn := in[:p.Len()]
				xs, rs, ms := in[p.Len()], in[p.Len()+1], in[p.Len()+2]
				scope := nn.ExpandedScope
				if ghost {
					scope = nn.GhostScope
				}
				s, exp, err := scope(p, pn, batch, func(int) bool { return true }, true)
				if err != nil {
					panic(err)
				}
				if ghost && len(s.DenseTaps()) != 0 {
					panic("taps before the forward pass")
				}
				loss := graph.ReduceAllSum(graph.Mul(f(s, graph.ConvertDType(xs, dtypes.Float32)), graph.ConvertDType(rs, dtypes.Float32)))
				if ghost && len(s.DenseTaps()) != 2 {
					panic("want two dense taps")
				}
				sums, norm, err := nn.ClippedSums(s, loss, exp, all, clip, ms)
				if err != nil {
					panic(err)
				}
				return append(sums, norm)
			})
			if err != nil {
				t.Fatal(err)
			}
			args := []any{}
			for i := 0; i < p.Len(); i++ {
				args = append(args, tensors.FromFlatDataAndDimensions(p.Values(i), p.Spec(i).Shape...))
			}
			out, err := ex.Call(append(args, x, r, mask)...)
			if err != nil {
				t.Fatalf("ghost=%v: %v", ghost, err)
			}
			var sums [][]float32
			for _, o := range out[:len(out)-1] {
				sums = append(sums, tensors.MustCopyFlatData[float32](o))
			}
			return sums, tensors.MustCopyFlatData[float32](out[len(out)-1])
		}
		es, en := run(false)
		gs, gn := run(true)
		for b := range en {
			if math.Abs(float64(en[b]-gn[b])) > 1e-5*math.Max(1, float64(en[b])) {
				t.Errorf("clip %g: example %d norm %g expanded, %g ghost", clip, b, en[b], gn[b])
			}
		}
		for k := range es {
			for j := range es[k] {
				if d := math.Abs(float64(es[k][j] - gs[k][j])); d > 1e-5+1e-4*math.Abs(float64(es[k][j])) {
					t.Fatalf("clip %g: %s[%d] = %g expanded, %g ghost", clip, p.Spec(k).Name, j, es[k][j], gs[k][j])
				}
			}
		}
		if clip == 1e-3 {
			// Every example clipped: the sum's norm is at most 4·clip.
			var n2 float64
			for _, s := range gs {
				for _, v := range s {
					n2 += float64(v) * float64(v)
				}
			}
			if math.Sqrt(n2) > 4*clip*(1+1e-4) {
				t.Errorf("clipped sum of 4 examples has norm %g > 4·C = %g", math.Sqrt(n2), 4*clip)
			}
		}
	}
}

func TestGhostDenseAppliedTwiceIsRefused(t *testing.T) {
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := eng.Backend()
	p := nn.NewParams()
	d, err := nn.NewDense(p, "d", 3, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	p.Init(1)
	for _, twice := range []bool{false, true} {
		ex, err := graph.NewExec(be, func(w, b, x *graph.Node) *graph.Node {
			s, _, err := nn.GhostScope(p, []*graph.Node{w, b}, 2, func(int) bool { return true }, true)
			if err != nil {
				panic(err)
			}
			y := d.Apply(s, x)
			if twice {
				y = d.Apply(s, y)
			}
			return y
		})
		if err == nil {
			// Graph construction panics; the trainer's callers recover it.
			err = func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("%v", r)
					}
				}()
				_, err = ex.Call(tensors.FromFlatDataAndDimensions(p.Values(0), 3, 3), tensors.FromFlatDataAndDimensions(p.Values(1), 3),
					tensors.FromFlatDataAndDimensions(make([]float32, 6), 2, 3))
				return err
			}()
		}
		if twice && (err == nil || !strings.Contains(err.Error(), "applied twice")) {
			t.Errorf("dense applied twice: error %v, want one saying so", err)
		}
		if !twice && err != nil {
			t.Errorf("dense applied once: %v", err)
		}
	}
}

// clipMode selects how clipRun computes clipped sums.
type clipMode struct {
	ghost  bool // dense layers by ghost norms (else every weight expanded)
	groups bool // ClippedGroupSums (else ClippedSums)
}

// clipRun evaluates ghostModel's objective Σ f(x)·r on a batch and returns
// the clipped sums (one per parameter) and the norms that ClippedSums or
// ClippedGroupSums report.
func clipRun(t *testing.T, p *nn.Params, f func(*nn.Scope, *graph.Node) *graph.Node, x, r *tensors.Tensor, mask []float32, groups []int32, clip float64, mode clipMode) ([][]float64, []float64) {
	t.Helper()
	x, r = localClone(t, x), localClone(t, r) // this run's engine binds them
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := eng.Backend()
	batch := len(mask)
	var all []int
	for i := 0; i < p.Len(); i++ {
		all = append(all, i)
	}
	ex, err := graph.NewExec(be, func(in []*graph.Node) []*graph.Node {
		pn := in[:p.Len()]
		xs, rs, ms, gs := in[p.Len()], in[p.Len()+1], in[p.Len()+2], in[p.Len()+3]
		scope := nn.ExpandedScope
		if mode.ghost {
			scope = nn.GhostScope
		}
		s, exp, err := scope(p, pn, batch, func(int) bool { return true }, true)
		if err != nil {
			panic(err)
		}
		loss := graph.ReduceAllSum(graph.Mul(f(s, graph.ConvertDType(xs, dtypes.Float32)), graph.ConvertDType(rs, dtypes.Float32)))
		var sums []*graph.Node
		var norm *graph.Node
		if mode.groups {
			sums, norm, err = nn.ClippedGroupSums(s, loss, exp, all, clip, ms, gs)
		} else {
			sums, norm, err = nn.ClippedSums(s, loss, exp, all, clip, graph.Add(ms, graph.MulScalar(graph.ConvertDType(gs, dtypes.Float32), 0)))
		}
		if err != nil {
			panic(err)
		}
		return append(sums, norm)
	})
	if err != nil {
		t.Fatal(err)
	}
	args := []any{}
	for i := 0; i < p.Len(); i++ {
		args = append(args, tensors.FromFlatDataAndDimensions(p.Values(i), p.Spec(i).Shape...))
	}
	out, err := ex.Call(append(args, x, r, tensors.FromFlatDataAndDimensions(mask, batch), tensors.FromFlatDataAndDimensions(groups, batch))...)
	if err != nil {
		t.Fatalf("%+v: %v", mode, err)
	}
	to64 := func(v []float32) []float64 {
		d := make([]float64, len(v))
		for i, x := range v {
			d[i] = float64(x)
		}
		return d
	}
	var sums [][]float64
	for _, o := range out[:len(out)-1] {
		sums = append(sums, to64(tensors.MustCopyFlatData[float32](o)))
	}
	return sums, to64(tensors.MustCopyFlatData[float32](out[len(out)-1]))
}

// perExampleGrads returns every example's gradient of Σ f(x)·r, flattened
// across all parameters in declaration order (the fully expanded reference).
func perExampleGrads(t *testing.T, p *nn.Params, f func(*nn.Scope, *graph.Node) *graph.Node, x, r *tensors.Tensor, batch int) [][]float64 {
	t.Helper()
	x, r = localClone(t, x), localClone(t, r) // this run's engine binds them
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := eng.Backend()
	ex, err := graph.NewExec(be, func(in []*graph.Node) []*graph.Node {
		s, exp, err := nn.ExpandedScope(p, in[:p.Len()], batch, func(int) bool { return true }, true)
		if err != nil {
			panic(err)
		}
		loss := graph.ReduceAllSum(graph.Mul(f(s, graph.ConvertDType(in[p.Len()], dtypes.Float32)), graph.ConvertDType(in[p.Len()+1], dtypes.Float32)))
		return graph.Gradient(loss, exp...)
	})
	if err != nil {
		t.Fatal(err)
	}
	args := []any{}
	for i := 0; i < p.Len(); i++ {
		args = append(args, tensors.FromFlatDataAndDimensions(p.Values(i), p.Spec(i).Shape...))
	}
	out, err := ex.Call(append(args, x, r)...)
	if err != nil {
		t.Fatal(err)
	}
	g := make([][]float64, batch)
	for _, o := range out {
		v := tensors.MustCopyFlatData[float32](o)
		per := len(v) / batch
		for b := range g {
			for _, x := range v[b*per : (b+1)*per] {
				g[b] = append(g[b], float64(x))
			}
		}
	}
	return g
}

func norm2(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

// flatten concatenates per-parameter sums.
func flatten(sums [][]float64) []float64 {
	var out []float64
	for _, s := range sums {
		out = append(out, s...)
	}
	return out
}

// closeVec reports the first coordinate where got and want differ beyond
// float32 rounding of sums of a few terms.
func closeVec(got, want []float64) (int, bool) {
	if len(got) != len(want) {
		return -1, false
	}
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	for j := range got {
		if !(math.Abs(got[j]-want[j]) <= 1e-5+1e-4*math.Abs(want[j])+1e-5*scale) { // NaN fails
			return j, false
		}
	}
	return 0, true
}

// TestGroupClippedSumsMatchExpanded checks ClippedGroupSums against the
// fully expanded computation done by hand (per-example gradients summed
// per group, each group's sum clipped to C, then added), with ghost dense
// layers and with every weight expanded, whether clipping binds for every
// group, for none or for some; a masked example belongs to no group.
func TestGroupClippedSumsMatchExpanded(t *testing.T) {
	const batch = 6
	x := nntest.Random(17, batch, 5, 5, 2)
	r := nntest.Random(18, batch, 3)
	mask := []float32{1, 1, 1, 0, 1, 1}
	groups := []int32{2, 2, 0, 0, 0, 5} // groups of 2, 2 (one masked) and 1 example
	p, f := ghostModel(t)
	per := perExampleGrads(t, p, f, x, r, batch)
	members := map[int32][]int{}
	for b, g := range groups {
		if mask[b] == 1 {
			members[g] = append(members[g], b)
		}
	}
	groupGrad := map[int32][]float64{}
	var norms []float64
	for g, bs := range members {
		sum := make([]float64, len(per[0]))
		for _, b := range bs {
			for j, v := range per[b] {
				sum[j] += v
			}
		}
		groupGrad[g] = sum
		norms = append(norms, norm2(sum))
	}
	slices.Sort(norms)
	for _, clip := range []float64{norms[0] / 10, norms[len(norms)-1] * 10, (norms[0] + norms[1]) / 2} {
		want := make([]float64, len(per[0]))
		bound := 0
		for _, g := range groupGrad {
			fac := 1.0
			if n := norm2(g); n > clip {
				fac = clip / n
				bound++
			}
			for j, v := range g {
				want[j] += fac * v
			}
		}
		for _, ghost := range []bool{false, true} {
			sums, gotNorms := clipRun(t, p, f, x, r, mask, groups, clip, clipMode{ghost: ghost, groups: true})
			if j, ok := closeVec(flatten(sums), want); !ok {
				t.Errorf("clip %g (binding for %d of %d groups), ghost %v: coordinate %d of the clipped sum differs from the expanded computation", clip, bound, len(groupGrad), ghost, j)
			}
			for g, gg := range groupGrad {
				if n := norm2(gg); math.Abs(gotNorms[g]-n) > 1e-4*n+1e-6 {
					t.Errorf("ghost %v: group %d norm %g, want %g", ghost, g, gotNorms[g], n)
				}
			}
			for _, g := range []int{1, 3, 4} {
				if gotNorms[g] != 0 {
					t.Errorf("ghost %v: empty group %d has norm %g", ghost, g, gotNorms[g])
				}
			}
		}
	}
}

// TestGroupOfOneIsExampleLevel: with every example alone in its group,
// group clipping is example clipping.
func TestGroupOfOneIsExampleLevel(t *testing.T) {
	const batch = 5
	x := nntest.Random(27, batch, 5, 5, 2)
	r := nntest.Random(28, batch, 3)
	mask := []float32{1, 0, 1, 1, 1}
	groups := []int32{4, 0, 1, 3, 2}
	p, f := ghostModel(t)
	for _, clip := range []float64{1e-3, 0.05, 1e6} {
		for _, ghost := range []bool{false, true} {
			es, en := clipRun(t, p, f, x, r, mask, groups, clip, clipMode{ghost: ghost})
			gs, gn := clipRun(t, p, f, x, r, mask, groups, clip, clipMode{ghost: ghost, groups: true})
			if j, ok := closeVec(flatten(gs), flatten(es)); !ok {
				t.Errorf("clip %g ghost %v: coordinate %d differs between groups of one and example clipping", clip, ghost, j)
			}
			for b, g := range groups {
				if mask[b] == 1 && math.Abs(gn[g]-en[b]) > 1e-5*math.Max(1, en[b]) {
					t.Errorf("clip %g ghost %v: example %d norm %g, its group's %g", clip, ghost, b, en[b], gn[g])
				}
			}
		}
	}
}

// TestIdentityInfluenceIsBounded plays the adversary of example-level
// DP-SGD on face data: one person contributes m images that all push the
// model the same way. Under example clipping that person moves the
// clipped (noiseless) sum by m·C, m times the bound the noise is
// calibrated to; under group clipping by at most C.
func TestIdentityInfluenceIsBounded(t *testing.T) {
	const batch, m, clip = 6, 4, 1e-3
	x := nntest.Random(37, batch, 5, 5, 2)
	r := nntest.Random(38, batch, 3)
	// Examples 1..4 are the same image of the target person (the
	// strongest case: their clipped gradients align).
	xv, rv := tensors.MustCopyFlatData[float64](x), tensors.MustCopyFlatData[float64](r)
	px, pr := len(xv)/batch, len(rv)/batch
	for b := 2; b <= m; b++ {
		copy(xv[b*px:(b+1)*px], xv[px:2*px])
		copy(rv[b*pr:(b+1)*pr], rv[pr:2*pr])
	}
	x = tensors.FromFlatDataAndDimensions(xv, batch, 5, 5, 2)
	r = tensors.FromFlatDataAndDimensions(rv, batch, 3)
	groups := []int32{0, 1, 1, 1, 1, 5}
	with := []float32{1, 1, 1, 1, 1, 1}
	without := []float32{1, 0, 0, 0, 0, 1}
	p, f := ghostModel(t)
	for _, ghost := range []bool{false, true} {
		influence := func(grouped bool) float64 {
			a, _ := clipRun(t, p, f, x, r, with, groups, clip, clipMode{ghost: ghost, groups: grouped})
			b, _ := clipRun(t, p, f, x, r, without, groups, clip, clipMode{ghost: ghost, groups: grouped})
			fa, fb := flatten(a), flatten(b)
			for j := range fa {
				fa[j] -= fb[j]
			}
			return norm2(fa)
		}
		if d := influence(true); d > clip*(1+1e-4) {
			t.Errorf("ghost %v: one identity moved the group-clipped sum by %g > C = %g", ghost, d, clip)
		}
		if d := influence(false); d < (m-0.01)*clip {
			t.Errorf("ghost %v: the attack on example clipping moved the sum by %g, want m·C = %g (the test lost its power)", ghost, d, m*clip)
		}
	}
}

// TestNonFiniteExampleContributesNothing: an example whose gradient is NaN
// (a NaN pixel) gets clip factor 0 and must not poison the sum: the result
// equals the sum without that example, for example and group clipping.
func TestNonFiniteExampleContributesNothing(t *testing.T) {
	const batch = 5
	x := nntest.Random(47, batch, 5, 5, 2)
	r := nntest.Random(48, batch, 3)
	xv := tensors.MustCopyFlatData[float64](x)
	per := len(xv) / batch
	bad := append([]float64(nil), xv...)
	bad[2*per+3] = math.NaN()
	inf := append([]float64(nil), xv...)
	inf[2*per+7] = math.Inf(1)
	groups := []int32{0, 1, 1, 3, 4} // example 2 shares a group with example 1
	all := []float32{1, 1, 1, 1, 1}
	skip := []float32{1, 1, 0, 1, 1}
	p, f := ghostModel(t)
	for _, mode := range []clipMode{{}, {ghost: true}, {groups: true}, {ghost: true, groups: true}} {
		for _, clip := range []float64{1e-3, 1e6} {
			want, _ := clipRun(t, p, f, x, r, skip, groups, clip, mode)
			for name, v := range map[string][]float64{"NaN": bad, "Inf": inf} {
				got, norms := clipRun(t, p, f, tensors.FromFlatDataAndDimensions(v, batch, 5, 5, 2), r, all, groups, clip, mode)
				if j, ok := closeVec(flatten(got), flatten(want)); !ok {
					t.Errorf("%+v clip %g, a %s input: coordinate %d is %g, want %g (the sum without that example)", mode, clip, name, j, flatten(got)[j], flatten(want)[j])
				}
				for b, n := range norms {
					if math.IsNaN(n) || math.IsInf(n, 0) {
						t.Errorf("%+v, a %s input: norm %d is %g", mode, name, b, n)
					}
				}
			}
		}
	}
}

// localClone returns an unbound copy of x: each run has an engine of its
// own, and a tensor is bound to the backend it first ran on.
func localClone(t *testing.T, x *tensors.Tensor) *tensors.Tensor {
	t.Helper()
	c, err := x.LocalClone()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
