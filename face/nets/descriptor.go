package nets

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"

	"github.com/veil-privacy/veil/face/tfjs"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// DescriptorSize is the input height and width of the descriptor network.
const DescriptorSize = 150

// DescriptorDim is the length of a face descriptor.
const DescriptorDim = 128

// Descriptor computes dlib's 128-d face descriptor (the ResNet-34-like
// network face-api ships as face_recognition_model). Descriptors are not
// L2-normalised (their norms are about 1.4); dlib compares them by Euclidean
// distance with threshold 0.6.
//
// A pass runs as plain Go kernels: im2col and matrix products for the
// convolutions, biases, ReLU, residual sums and pools (descriptor_kern.go,
// kern_gemm.go); the whole-graph GoMLX build is the reference path.
type Descriptor struct {
	r *netRunner
	w *descriptorW // also drives the whole-graph reference path (build)
}

// resConv is a convolution with bias whose per-channel scale layer
// (x*s + t) has been folded into the filters and bias at load time:
// (conv(x, W) + b)*s + t = conv(x, W*s) + (b*s + t).
type resConv struct {
	w, b *tfjs.Tensor
}

// descResidualW holds a residual block's two folded convolutions.
type descResidualW struct {
	conv1, conv2 resConv
}

// descriptorW holds every tensor of the descriptor network.
type descriptorW struct {
	conv32Down resConv         // input channels padded to 4 (for the graph path)
	conv0      resConv         // the same with its 3 input channels
	blocks     []descResidualW // conv32_1..3, conv64_down, conv64_1..3, ... conv256_down_out
	down       []bool          // whether blocks[i] is a down-sampling block
	fc         *tfjs.Tensor
}

// descriptorBlocks lists the residual blocks in order: name, input and
// output channels, and whether the block down-samples.
var descriptorBlocks = []struct {
	name     string
	cin, cou int
	down     bool
}{
	{"conv32_1", 32, 32, false}, {"conv32_2", 32, 32, false}, {"conv32_3", 32, 32, false},
	{"conv64_down", 32, 64, true}, {"conv64_1", 64, 64, false}, {"conv64_2", 64, 64, false}, {"conv64_3", 64, 64, false},
	{"conv128_down", 64, 128, true}, {"conv128_1", 128, 128, false}, {"conv128_2", 128, 128, false},
	{"conv256_down", 128, 256, true}, {"conv256_1", 256, 256, false}, {"conv256_2", 256, 256, false},
	{"conv256_down_out", 256, 256, true},
}

// descFoldedConv reads prefix/conv/{filters,bias} and prefix/scale/{weights,biases}
// and folds the scale into the convolution.
func descFoldedConv(wi *weightsIn, prefix string, k, cin, cout int) resConv {
	f := wi.get(prefix+"/conv/filters", k, k, cin, cout)
	b := wi.get(prefix+"/conv/bias", cout)
	s := wi.get(prefix+"/scale/weights", cout)
	t := wi.get(prefix+"/scale/biases", cout)
	w := &tfjs.Tensor{Name: f.Name, Shape: f.Shape, DType: tfjs.Float32, F32: make([]float32, len(f.F32))}
	for i, v := range f.F32 {
		w.F32[i] = v * s.F32[i%cout]
	}
	bias := &tfjs.Tensor{Name: b.Name, Shape: b.Shape, DType: tfjs.Float32, F32: make([]float32, cout)}
	for o := range cout {
		bias.F32[o] = b.F32[o]*s.F32[o] + t.F32[o]
	}
	return resConv{w: w, b: bias}
}

// padInputChannel appends a zero input channel to a k×k×3×cout filter, so
// the first convolution can take a zero-padded 4-channel input, whose
// channel pairs packedConv2d can pack.
func padInputChannel(c resConv) resConv {
	k, cout := c.w.Shape[0], c.w.Shape[3]
	w := &tfjs.Tensor{Name: c.w.Name, Shape: []int{k, k, 4, cout}, DType: tfjs.Float32, F32: make([]float32, k*k*4*cout)}
	for tap := range k * k {
		copy(w.F32[tap*4*cout:tap*4*cout+3*cout], c.w.F32[tap*3*cout:(tap+1)*3*cout])
	}
	return resConv{w: w, b: c.b}
}

// loadDescriptorWeights reads and folds the descriptor's weights.
func loadDescriptorWeights(w *tfjs.Weights) (*descriptorW, error) {
	wi := &weightsIn{w: w}
	conv0 := descFoldedConv(wi, "conv32_down", 7, 3, 32)
	dw := &descriptorW{conv32Down: padInputChannel(conv0), conv0: conv0}
	for _, bl := range descriptorBlocks {
		dw.blocks = append(dw.blocks, descResidualW{
			conv1: descFoldedConv(wi, bl.name+"/conv1", 3, bl.cin, bl.cou),
			conv2: descFoldedConv(wi, bl.name+"/conv2", 3, bl.cou, bl.cou),
		})
		dw.down = append(dw.down, bl.down)
	}
	dw.fc = wi.get("fc", 256, DescriptorDim)
	if wi.err != nil {
		return nil, fmt.Errorf("nets: face_recognition_model: %w", wi.err)
	}
	return dw, nil
}

// NewDescriptor loads face_recognition_model from modelDir (see
// DefaultModelDir), verifying its files against the pinned sha256 sums.
// Its kernels run on up to eng.Parallelism() goroutines; nil means the
// default (engine.Parallelism).
func NewDescriptor(modelDir string, eng *engine.Engine) (*Descriptor, error) {
	w, err := LoadWeights(modelDir, "face_recognition_model")
	if err != nil {
		return nil, err
	}
	dw, err := loadDescriptorWeights(w)
	if err != nil {
		return nil, err
	}
	par := newKernPar(eng)
	k, err := newDescKern(dw, par)
	if err != nil {
		return nil, err
	}
	return &Descriptor{r: newKernRunner(par, "descriptor", DescriptorSize, DescriptorDim, k.forward), w: dw}, nil
}

// DescriptorInput applies face-api's preprocessing to a face crop: zero-pad
// to a square, centred (round(diff/2) after, the rest before), and
// TensorFlow bilinear resize to 150×150 (skipped when the square already is
// 150). Values stay 0..255. It returns nil for a nil or empty crop, which
// Compute rejects with an error.
func DescriptorInput(crop *imaging.RGB) *imaging.Float {
	return faceCropInput(crop, DescriptorSize)
}

// faceCropInput is face-api's NetInput.toBatchTensor(size, true) for one image.
func faceCropInput(crop *imaging.RGB, size int) *imaging.Float {
	if crop == nil || crop.W <= 0 || crop.H <= 0 {
		return nil
	}
	f := crop.ToFloat()
	if f == nil {
		return nil
	}
	if f.W != f.H {
		f, _, _ = imaging.PadToSquare(f, true)
	}
	if f.W != size || f.H != size {
		f = imaging.ResizeBilinear(f, size, size)
	}
	return f
}

// Compute runs the network on 150×150×3 inputs with values 0..255 (the
// mean subtraction and division by 255 happen inside) and returns one
// 128-d descriptor per input, in order. It is safe for concurrent use;
// inputs are batched internally and spread over the available cores.
func (d *Descriptor) Compute(inputs []*imaging.Float) ([][]float32, error) {
	return d.r.run(inputs)
}

// apply runs a folded convolution.
func (c resConv) apply(x *graph.Node, s int, p Padding) *graph.Node {
	g := x.Graph()
	return packedConv2d(x, constant(g, c.w), constant(g, c.b), s, p)
}

// padHWC appends n zero channels to NHWC x.
func padHWC(x *graph.Node, n int) *graph.Node {
	return graph.Pad(x, graph.Scalar(x.Graph(), x.DType(), 0), compute.PadAxis{}, compute.PadAxis{},
		compute.PadAxis{}, compute.PadAxis{End: n})
}

// packedMaxPool is a k×k VALID max pool with stride s whose window slices
// move channel pairs as int64 (see packedConv2d); C must be even.
func packedMaxPool(x *graph.Node, k, s int) *graph.Node {
	d := x.Shape().Dimensions
	packed := graph.Bitcast(graph.Reshape(x, d[0], d[1], d[2], d[3]/2, 2), dtypes.Int64)
	var y *graph.Node
	for _, part := range windows(packed, k, s, Valid, 0) {
		f := graph.Bitcast(part, dtypes.Float32)
		if y == nil {
			y = f
		} else {
			y = graph.Max(y, f)
		}
	}
	yd := y.Shape().Dimensions
	return graph.Reshape(y, yd[0], yd[1], yd[2], d[3])
}

// packedConv2d is conv2d with a cheaper im2col when the channel count is
// even: the pure-Go backend slices element by element, so pairs of float32
// channels are bit-cast to one int64 before the strided window slices and
// back afterwards, halving the elements the slices copy. The column order
// (tap-major, then channel) is the same as conv2d's.
func packedConv2d(x, w, b *graph.Node, s int, p Padding) *graph.Node {
	kd := w.Shape().Dimensions
	k, cin, cout := kd[0], kd[2], kd[3]
	if cin%2 != 0 || k == 1 {
		return conv2d(x, w, b, s, p)
	}
	d := x.Shape().Dimensions
	packed := graph.Bitcast(graph.Reshape(x, d[0], d[1], d[2], cin/2, 2), dtypes.Int64)
	cols := graph.Concatenate(windows(packed, k, s, p, 0), 3)
	cd := cols.Shape().Dimensions
	flat := graph.Reshape(graph.Bitcast(cols, dtypes.Float32), cd[0]*cd[1]*cd[2], k*k*cin)
	m := cd[0] * cd[1] * cd[2]
	y := graph.Dot(flat, graph.Reshape(w, k*k*cin, cout)).Product()
	y = graph.Add(y, tileRows(graph.Reshape(b, 1, cout), m)) // no broadcasting add
	return graph.Reshape(y, cd[0], cd[1], cd[2], cout)
}

// build is the descriptor graph: [N,150,150,3] (0..255) → [N,128].
func (dw *descriptorW) build(x *graph.Node) *graph.Node {
	x = faNormalize(x)
	x = padHWC(x, 1) // a zero fourth channel (its filter taps are zero)
	x = netRelu(dw.conv32Down.apply(x, 2, Valid))
	x = packedMaxPool(x, 3, 2)
	for i, bl := range dw.blocks {
		if dw.down[i] {
			x = descResidualDown(x, bl)
		} else {
			x = descResidual(x, bl)
		}
	}
	x = graph.ReduceMean(x, 1, 2)
	return graph.Dot(x, constant(x.Graph(), dw.fc)).Product()
}

// residual is netRelu(conv2(netRelu(conv1(x))) + x), 3×3 SAME convolutions.
func descResidual(x *graph.Node, bl descResidualW) *graph.Node {
	out := netRelu(bl.conv1.apply(x, 1, Same))
	out = bl.conv2.apply(out, 1, Same)
	return netRelu(graph.Add(out, x))
}

// residualDown is the down-sampling block: conv1 3×3 stride 2 VALID, conv2
// 3×3 SAME; the shortcut is a 2×2 average pool of x with zero channels
// appended; a conv output smaller than the shortcut is padded with a zero
// row at the bottom and a zero column at the right.
func descResidualDown(x *graph.Node, bl descResidualW) *graph.Node {
	out := netRelu(bl.conv1.apply(x, 2, Valid))
	out = bl.conv2.apply(out, 1, Same)
	pooled := avgPoolValid(x, 2, 2)
	od, pd := out.Shape().Dimensions, pooled.Shape().Dimensions
	if od[1] != pd[1] || od[2] != pd[2] {
		out = padHW(out, 0, pd[1]-od[1], 0, pd[2]-od[2], 0)
	}
	if pd[3] != od[3] {
		pooled = graph.Concatenate([]*graph.Node{pooled, graph.ZerosLike(pooled)}, 3)
	}
	return netRelu(graph.Add(out, pooled))
}
