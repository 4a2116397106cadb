package nets

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/face/tfjs"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// LandmarkSize is the input height and width of the landmark networks.
const LandmarkSize = 112

// Landmarker runs face-api's 68-point landmark network
// (face_landmark_68_model) or its tiny variant (face_landmark_68_tiny_model).
//
// A pass runs as plain Go kernels: the pointwise and first convolutions'
// matrix products (kern_gemm.go), the depthwise convolutions, im2col,
// biases, ReLU, dense-block sums and pooling (landmarks_kern.go).
type Landmarker struct {
	r    *netRunner
	tiny bool
	w    *landmarkW // also drives the whole-graph reference path (build)
}

// sepConv is a depthwise-separable convolution: depthwise 3×3 SAME, then
// pointwise 1×1, plus bias.
type sepConv struct {
	dw, pw, b *tfjs.Tensor
}

// loadSep reads prefix/{depthwise_filter,pointwise_filter,bias}.
func loadSep(wi *weightsIn, prefix string, cin, cout int) sepConv {
	return sepConv{
		dw: wi.get(prefix+"/depthwise_filter", 3, 3, cin, 1),
		pw: wi.get(prefix+"/pointwise_filter", 1, 1, cin, cout),
		b:  wi.get(prefix+"/bias", cout),
	}
}

// apply runs the separable convolution with the given depthwise stride.
func (s sepConv) apply(x *graph.Node, stride int) *graph.Node {
	g := x.Graph()
	y := packedDepthwise(x, s.dw, stride)
	return pointwise(y, constant(g, s.pw), constant(g, s.b))
}

// pointwise is a 1×1 stride-1 convolution whose bias is added as a
// row-tiled [M, cout] tensor rather than by broadcasting (see
// packedDepthwise).
func pointwise(x, w, b *graph.Node) *graph.Node {
	d := x.Shape().Dimensions
	cin, cout := w.Shape().Dimensions[2], w.Shape().Dimensions[3]
	m := d[0] * d[1] * d[2]
	y := graph.Dot(graph.Reshape(x, m, cin), graph.Reshape(w, cin, cout)).Product()
	y = graph.Add(y, tileRows(graph.Reshape(b, 1, cout), m))
	return graph.Reshape(y, d[0], d[1], d[2], cout)
}

// packedDepthwise is a 3×3 SAME depthwise convolution (no bias) written for
// the pure-Go backend, whose Slice and broadcasting element-wise ops walk
// one element at a time while Concatenate, Bitcast and same-shape
// element-wise ops run over contiguous memory:
//   - the window slices move channel pairs as int64 (half the elements);
//   - each tap's per-channel weights are tiled, at graph-build time, into a
//     [1, outW·C] constant and repeated to [N·outH, outW·C] by concatenation,
//     so the multiply needs no broadcasting.
//
// The arithmetic (and so the result) is the same as depthwise's.
func packedDepthwise(x *graph.Node, w *tfjs.Tensor, stride int) *graph.Node {
	g := x.Graph()
	d := x.Shape().Dimensions
	c := d[3]
	k := w.Shape[0]
	if c%2 != 0 {
		return depthwise(x, constant(g, w), nil, stride, Same)
	}
	packed := graph.Bitcast(graph.Reshape(x, d[0], d[1], d[2], c/2, 2), dtypes.Int64)
	var y *graph.Node
	var oh, ow int
	for i, part := range windows(packed, k, stride, Same, 0) {
		pd := part.Shape().Dimensions
		oh, ow = pd[1], pd[2]
		f := graph.Reshape(graph.Bitcast(part, dtypes.Float32), d[0]*oh, ow*c)
		row := make([]float32, ow*c)
		for j := range row {
			row[j] = w.F32[i*c+j%c]
		}
		wt := tileRows(graph.Const(g, tensors.FromFlatDataAndDimensions(row, 1, ow*c)), d[0]*oh)
		term := graph.Mul(f, wt)
		if y == nil {
			y = term
		} else {
			y = graph.Add(y, term)
		}
	}
	return graph.Reshape(y, d[0], oh, ow, c)
}

// tileRows repeats the single row of v ([1, K]) n times along axis 0.
func tileRows(v *graph.Node, n int) *graph.Node { return tileAlong(v, n, 0) }

// tileAlong concatenates n copies of v (size 1 on axis) along axis, with
// O(log n) concatenations of doubling size: copies, never the Go
// backend's slow broadcasting iterator.
func tileAlong(v *graph.Node, n, axis int) *graph.Node {
	var parts []*graph.Node
	p := v
	for n > 0 {
		if n&1 == 1 {
			parts = append(parts, p)
		}
		n >>= 1
		if n > 0 {
			p = graph.Concatenate([]*graph.Node{p, p}, axis)
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return graph.Concatenate(parts, axis)
}

// denseBlock is one of face-api's dense blocks: conv0 (a plain 3×3 conv in
// the first block, else separable) with stride 2, then 2 or 3 separable
// convolutions whose inputs are the ReLU of the running sum.
type denseBlock struct {
	first  bool
	conv0W *tfjs.Tensor // first block: 3×3 filters
	conv0B *tfjs.Tensor
	conv0  sepConv // other blocks
	convs  []sepConv
}

// landmarkW holds a landmark network's tensors.
type landmarkW struct {
	blocks    []denseBlock
	pool      int // average-pool window before fc (7 or 14)
	fcW, fcB  *tfjs.Tensor
	featureIn int
}

func loadLandmarkWeights(w *tfjs.Weights, tiny bool) (*landmarkW, error) {
	wi := &weightsIn{w: w}
	chans := []int{32, 64, 128, 256}
	convsPer := 3 // conv1..conv3 after conv0
	lw := &landmarkW{pool: 7}
	if tiny {
		chans = chans[:3]
		convsPer = 2
		lw.pool = 14
	}
	cin := 3
	for i, c := range chans {
		p := fmt.Sprintf("dense%d", i)
		bl := denseBlock{first: i == 0}
		if bl.first {
			bl.conv0W = wi.get(p+"/conv0/filters", 3, 3, cin, c)
			bl.conv0B = wi.get(p+"/conv0/bias", c)
		} else {
			bl.conv0 = loadSep(wi, p+"/conv0", cin, c)
		}
		for j := 1; j <= convsPer; j++ {
			bl.convs = append(bl.convs, loadSep(wi, fmt.Sprintf("%s/conv%d", p, j), c, c))
		}
		lw.blocks = append(lw.blocks, bl)
		cin = c
	}
	lw.featureIn = cin
	lw.fcW = wi.get("fc/weights", cin, 136)
	lw.fcB = wi.get("fc/bias", 136)
	if wi.err != nil {
		return nil, wi.err
	}
	return lw, nil
}

// NewLandmarker loads face_landmark_68_model, or face_landmark_68_tiny_model
// when tiny is set, from modelDir, verifying the files' sha256 sums. Its
// kernels run on up to eng.Parallelism() goroutines; nil means the default
// (engine.Parallelism).
func NewLandmarker(modelDir string, tiny bool, eng *engine.Engine) (*Landmarker, error) {
	model := "face_landmark_68_model"
	if tiny {
		model = "face_landmark_68_tiny_model"
	}
	w, err := LoadWeights(modelDir, model)
	if err != nil {
		return nil, err
	}
	lw, err := loadLandmarkWeights(w, tiny)
	if err != nil {
		return nil, fmt.Errorf("nets: %s: %w", model, err)
	}
	par := newKernPar(eng)
	k, err := newLandmarkKern(model, lw, par)
	if err != nil {
		return nil, err
	}
	return &Landmarker{r: newKernRunner(par, model, LandmarkSize, 136, k.forward), tiny: tiny, w: lw}, nil
}

// Tiny reports whether this is the tiny landmark network.
func (l *Landmarker) Tiny() bool { return l.tiny }

// LandmarkCrop records the size of the crop a landmark input was made from,
// which is what LandmarksToImage needs to undo face-api's padding.
type LandmarkCrop struct {
	W, H int // crop width and height in pixels
}

// LandmarkInput applies face-api's landmark preprocessing to a detection
// crop: zero-pad to a square, centred (round(diff/2) after, the rest
// before), and TensorFlow bilinear resize to 112×112; values stay 0..255.
// It returns nil for a nil or empty crop, which Compute rejects.
func LandmarkInput(crop *imaging.RGB) (*imaging.Float, LandmarkCrop) {
	if crop == nil {
		return nil, LandmarkCrop{}
	}
	return faceCropInput(crop, LandmarkSize), LandmarkCrop{W: crop.W, H: crop.H}
}

// Compute runs the network on 112×112×3 inputs (0..255) and returns 68
// (x, y) points per input, exactly face-api's raw network output: fractions
// of the padded 112×112 square (multiply by 112 for input pixels; points
// can fall slightly outside 0..1). Use LandmarksToImage to get image
// pixels. Safe for concurrent use; batches internally.
func (l *Landmarker) Compute(inputs []*imaging.Float) ([][68][2]float32, error) {
	raw, err := l.r.run(inputs)
	if err != nil {
		return nil, err
	}
	out := make([][68][2]float32, len(raw))
	for i, v := range raw {
		for p := range 68 {
			out[i][p] = [2]float32{v[2*p], v[2*p+1]}
		}
	}
	return out, nil
}

// LandmarksToImage maps raw landmark outputs (Compute's frame) to image
// pixels the way face-api does: the square padding is removed assuming
// |w-h|/2 on each side of the shorter axis (face-api's postProcess, even
// when the pixel padding was uneven), positions are scaled to the crop
// size, then shifted by (shiftX, shiftY). face-api shifts by the unrounded
// detection box's top-left corner while it cuts the crop at the rounded
// one; passing the detection box's x, y here reproduces faces.json's
// landmarks68.
func LandmarksToImage(raw [68][2]float32, crop LandmarkCrop, shiftX, shiftY float64) [68][2]float64 {
	var out [68][2]float64
	if crop.W <= 0 || crop.H <= 0 {
		return out
	}
	w, h := float64(crop.W), float64(crop.H)
	scale := LandmarkSize / max(w, h)
	sw, sh := w*scale, h*scale
	var padX, padY float64
	if sw < sh {
		padX = (sh - sw) / 2
	}
	if sh < sw {
		padY = (sw - sh) / 2
	}
	for i, p := range raw {
		rx := (float64(p[0])*LandmarkSize - padX) / sw
		ry := (float64(p[1])*LandmarkSize - padY) / sh
		out[i] = [2]float64{rx*w + shiftX, ry*h + shiftY}
	}
	return out
}

// build is the landmark graph: [N,112,112,3] (0..255) → [N,136].
func (lw *landmarkW) build(x *graph.Node) *graph.Node {
	g := x.Graph()
	x = faNormalize(x)
	for _, bl := range lw.blocks {
		var out1 *graph.Node
		if bl.first {
			out1 = conv2d(x, constant(g, bl.conv0W), constant(g, bl.conv0B), 2, Same)
		} else {
			out1 = bl.conv0.apply(x, 2)
		}
		out1 = netRelu(out1)
		// sum holds out1 + out2 + ... ; each conv reads relu(sum).
		sum := out1
		in := out1
		// face-api adds right to left, out1 + (out2 + out3); the float32
		// association differs only in rounding, far below the tolerance.
		for _, c := range bl.convs {
			sum = graph.Add(sum, c.apply(in, 1))
			in = netRelu(sum)
		}
		x = in
	}
	x = avgPoolValid(x, lw.pool, 2)
	x = graph.Reshape(x, x.Shape().Dimensions[0], lw.featureIn)
	return graph.Add(graph.Dot(x, constant(g, lw.fcW)).Product(), graph.Reshape(constant(g, lw.fcB), 1, 136))
}
