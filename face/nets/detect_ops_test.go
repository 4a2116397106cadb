package nets

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/face/tfjs"
	"github.com/veil-privacy/veil/internal/engine"
)

// TestDepthwiseVariantsMatchReference checks the tiled GoMLX depthwise
// (detDepthwise) and the Go kernel (ssdDepthwise3x3, with bias and relu6)
// against the direct reference convolution of ops_test.go.
func TestDepthwiseVariantsMatchReference(t *testing.T) {
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := eng.Backend()
	r := rand.New(rand.NewPCG(5, 6))
	tests := []struct {
		name       string
		h, w, c, s int
	}{
		{"s1", 7, 6, 20, 1},
		{"s2 odd", 7, 9, 16, 2},
		{"s2 even", 8, 6, 33, 2},
		{"1x1 input s2", 1, 1, 8, 2},
		// Channel counts that are multiples of 8 take detDwRow's vector
		// path for the windows inside the map.
		{"s1 c16", 9, 11, 16, 1},
		{"s2 c24 odd", 9, 13, 24, 2},
		{"s2 c8 even", 10, 12, 8, 2},
		{"s1 3x3 input", 3, 3, 8, 1},
		{"s1 2 columns", 5, 2, 8, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := randVec(r, tc.h*tc.w*tc.c)
			kw := randVec(r, 9*tc.c)
			b := randVec(r, tc.c)
			want, oh, ow := refConv(x, tc.h, tc.w, tc.c, kw, 3, 0, tc.s, Same, true)
			for i := range want {
				want[i] += b[i%tc.c]
			}
			wt := &tfjs.Tensor{Shape: []int{3, 3, tc.c, 1}, DType: tfjs.Float32, F32: kw}
			bt := &tfjs.Tensor{Shape: []int{tc.c}, DType: tfjs.Float32, F32: b}
			exec, err := graph.NewExec(be, func(xn *graph.Node) *graph.Node { return detDepthwise(xn, wt, bt, tc.s, Same) })
			if err != nil {
				t.Fatal(err)
			}
			res, err := exec.Call(tensors.FromFlatDataAndDimensions(x, 1, tc.h, tc.w, tc.c))
			if err != nil {
				t.Fatal(err)
			}
			got := tensors.MustCopyFlatData[float32](res[0])
			kern := make([]float32, len(want))
			kh, kw2 := ssdDepthwise3x3(newKernPar(nil), kern, x, tc.h, tc.w, tc.c, tc.s, kw, b, true)
			linear := make([]float32, len(want))
			ssdDepthwise3x3(newKernPar(nil), linear, x, tc.h, tc.w, tc.c, tc.s, kw, b, false)
			if kh != oh || kw2 != ow || len(got) != len(want) || len(kern) != len(want) {
				t.Fatalf("sizes: graph %d, kernel %dx%d (%d), want %dx%d (%d)", len(got), kh, kw2, len(kern), oh, ow, len(want))
			}
			for i := range want {
				if math.Abs(float64(got[i]-want[i])) > 1e-4 {
					t.Fatalf("graph value %d: %v, want %v", i, got[i], want[i])
				}
				r6 := min(max(want[i], 0), 6)
				if math.Abs(float64(kern[i]-r6)) > 1e-4 {
					t.Fatalf("kernel value %d: %v, want %v", i, kern[i], r6)
				}
				if math.Abs(float64(linear[i]-want[i])) > 1e-4 {
					t.Fatalf("kernel value %d without relu6: %v, want %v", i, linear[i], want[i])
				}
			}
		})
	}
}

// BenchmarkDetDepthwise compares depthwise 3×3 implementations on a
// 64×64×256 map: the broadcast GoMLX version of ops.go, the tiled GoMLX
// version (detDepthwise) and the Go kernel the SSD uses.
func BenchmarkDetDepthwise(b *testing.B) {
	eng, err := engine.New(engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	be := eng.Backend()
	const H, C = 64, 256
	r := rand.New(rand.NewPCG(1, 2))
	x := randVec(r, H*H*C)
	w := randVec(r, 9*C)
	bias := make([]float32, C)
	wt := &tfjs.Tensor{Shape: []int{3, 3, C, 1}, DType: tfjs.Float32, F32: w}
	xt := tensors.FromFlatDataAndDimensions(x, 1, H, H, C)
	graphBench := func(b *testing.B, fn func(x *graph.Node) *graph.Node) {
		e, err := graph.NewExec(be, fn)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			out, err := e.Call(xt)
			if err != nil {
				b.Fatal(err)
			}
			_ = out[0].FinalizeAll()
		}
	}
	b.Run("gomlx-broadcast", func(b *testing.B) {
		graphBench(b, func(x *graph.Node) *graph.Node { return depthwise(x, constant(x.Graph(), wt), nil, 1, Same) })
	})
	b.Run("gomlx-tiled", func(b *testing.B) {
		graphBench(b, func(x *graph.Node) *graph.Node { return detDepthwise(x, wt, nil, 1, Same) })
	})
	b.Run("go-kernel", func(b *testing.B) {
		out := make([]float32, len(x))
		for b.Loop() {
			ssdDepthwise3x3(newKernPar(nil), out, x, H, H, C, 1, w, bias, true)
		}
	})
}

// Graph versions of the depthwise convolution, kept to measure the Go kernel
// against (BenchmarkDetDepthwise). There, a
// binary op whose operands differ in shape goes through a generic broadcast
// iterator (about 4 ns per element), while same-shape ops, scalar ops,
// slices and concatenations are simple loops or copies. So per-channel
// vectors (biases, depthwise weights) are never broadcast at run time:
// a one-row constant [1,1,W,C] is tiled to [1,H,W,C] by concatenation
// (copies) and then combined with a same-shape op. The detectors go further
// and run their depthwise layers as Go kernels (ssd_dw.go);
// BenchmarkDetDepthwise compares the three versions.

// detRow returns the per-channel vector v ([C]) repeated w times as a
// constant [1,1,w,C].
func detRow(g *graph.Graph, v []float32, w int) *graph.Node {
	c := len(v)
	row := make([]float32, w*c)
	for i := 0; i < w; i++ {
		copy(row[i*c:], v)
	}
	return graph.Const(g, tensors.FromFlatDataAndDimensions(row, 1, 1, w, c))
}

// detChannelConst returns the per-channel vector v as a constant tensor of
// the full NHWC shape dims (batch 1), built by tiling.
func detChannelConst(g *graph.Graph, v []float32, dims []int) *graph.Node {
	return tileAlong(detRow(g, v, dims[2]), dims[1], 1)
}

// detDepthwise is a 3×3 (k×k) depthwise convolution of NHWC x (batch 1)
// with filter w [k,k,C,1] and bias b (may be nil): the sum over the k² taps
// of a strided slice times the tap's weights tiled to the output shape.
func detDepthwise(x *graph.Node, w, b *tfjs.Tensor, s int, p Padding) *graph.Node {
	g := x.Graph()
	k, c := w.Shape[0], w.Shape[2]
	var y *graph.Node
	for i, part := range windows(x, k, s, p, 0) {
		dims := part.Shape().Dimensions
		term := graph.Mul(part, detChannelConst(g, w.F32[i*c:(i+1)*c], dims))
		if y == nil {
			y = term
		} else {
			y = graph.Add(y, term)
		}
	}
	if b != nil {
		y = graph.Add(y, detChannelConst(g, b.F32, y.Shape().Dimensions))
	}
	return y
}

// TestDetBiasRelu6 checks bias plus relu6 on channel counts that take the
// vector path (multiples of 8) and the per-pixel one, against the
// definition.
func TestDetBiasRelu6(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []int{8, 12, 16, 40} {
		const pixels = 37
		x := make([]float32, pixels*c)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 5)
		}
		b := randVec(r, c)
		got := slices.Clone(x)
		detBiasRelu6(newKernPar(nil), got, b)
		for i, v := range x {
			want := min(max(v+b[i%c], 0), 6)
			if got[i] != want {
				t.Fatalf("%d channels: value %d is %v, want %v", c, i, got[i], want)
			}
		}
	}
}
