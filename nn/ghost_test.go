package nn_test

import (
	"fmt"
	"math"
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
	be, err := engine.Backend()
	if err != nil {
		t.Fatal(err)
	}
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
	be, err := engine.Backend()
	if err != nil {
		t.Fatal(err)
	}
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
