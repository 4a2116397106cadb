package nets

import (
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/face/tfjs"
)

// The detectors' convolution blocks, tuned for the pure-Go backend. There, a
// binary op whose operands differ in shape goes through a generic broadcast
// iterator (about 4 ns per element), while same-shape ops, scalar ops,
// slices and concatenations are simple loops or copies. So per-channel
// vectors (biases, depthwise weights) are never broadcast at run time:
// a one-row constant [1,1,W,C] is tiled to [1,H,W,C] by concatenation
// (copies) and then combined with a same-shape op. This is used by the tiny
// detector; the SSD backbone goes further and runs its depthwise layers as
// Go kernels (ssd_dw.go): BenchmarkDetDepthwise compares the three.

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

// detTileRows concatenates n copies of x ([1,1,W,C]) along axis 1 using
// O(log n) concatenations.
func detTileRows(x *graph.Node, n int) *graph.Node {
	var parts []*graph.Node
	cur := x
	for n > 0 {
		if n&1 == 1 {
			parts = append(parts, cur)
		}
		n >>= 1
		if n > 0 {
			cur = graph.Concatenate([]*graph.Node{cur, cur}, 1)
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return graph.Concatenate(parts, 1)
}

// detChannelConst returns the per-channel vector v as a constant tensor of
// the full NHWC shape dims (batch 1), built by tiling.
func detChannelConst(g *graph.Graph, v []float32, dims []int) *graph.Node {
	return detTileRows(detRow(g, v, dims[2]), dims[1])
}

// detConv is conv2d (square HWIO kernel w, stride s) plus bias b, with the
// bias added as a tiled same-shape constant.
func detConv(x *graph.Node, w, b *tfjs.Tensor, s int, p Padding) *graph.Node {
	g := x.Graph()
	y := conv2d(x, constant(g, w), nil, s, p)
	if b == nil {
		return y
	}
	return graph.Add(y, detChannelConst(g, b.F32, y.Shape().Dimensions))
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
