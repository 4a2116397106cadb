package nets

import (
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/face/tfjs"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// SSDInputSize is the side of the SSD-MobileNet-v1 input square.
const SSDInputSize = 512

// SSDAnchors is the number of anchors (and outputs) of SSD-MobileNet-v1.
const SSDAnchors = 5118

// ssdBNEpsilon is the batch-norm epsilon of the MobileNet-v1 backbone
// (float32(0.001) as stored in face-api).
const ssdBNEpsilon = 0.0010000000474974513

// SSDOptions configures SSD.Detect. Zero fields take face-api's defaults.
type SSDOptions struct {
	// MinScore keeps detections scoring above it (default 0.5).
	MinScore float64
	// MaxResults bounds the number of faces returned (default 100).
	MaxResults int
	// IoU is the non-maximum-suppression threshold (default 0.5).
	IoU float64
}

// withDefaults fills zero fields and validates the options.
func (o SSDOptions) withDefaults() (SSDOptions, error) {
	if o.MinScore == 0 {
		o.MinScore = 0.5
	}
	if o.MaxResults == 0 {
		o.MaxResults = 100
	}
	if o.IoU == 0 {
		o.IoU = 0.5
	}
	if !(o.MinScore > 0 && o.MinScore < 1) {
		return o, fmt.Errorf("nets: SSD min score %v outside (0,1)", o.MinScore)
	}
	if o.MaxResults < 0 {
		return o, fmt.Errorf("nets: SSD max results %d is negative", o.MaxResults)
	}
	if !(o.IoU > 0 && o.IoU <= 1) {
		return o, fmt.Errorf("nets: SSD IoU threshold %v outside (0,1]", o.IoU)
	}
	return o, nil
}

// SSD is face-api's SSD-MobileNet-v1 face detector.
//
// A pass runs the backbone as Go kernels (the first 3×3 convolution as
// im2col and a matrix product, the depthwise convolutions, the thirteen
// pointwise convolutions as matrix products (kernGemm), biases and relu6)
// and the prediction layers with the box heads, on the 32×32 and smaller
// maps, as one GoMLX execution. (The backbone was a chain of GoMLX
// executions; the depthwise convolutions left it first, see ssd_dw.go, and
// the products then, which kernGemm computes up to twice as fast on these
// shapes, see BenchmarkKernGemm: BenchmarkSSD/raw512 went from about 450
// to 390 CPU-ms.)
//
// An SSD is safe for concurrent use: the compiled graph and the weights are
// shared and read-only, and each call runs its own execution, so two
// goroutines detecting on two images use two cores.
type SSD struct {
	first   *kernGemm     // conv 3×3 stride 2 (no bias) of x/127.5-1, on im2col rows
	pw      [13]*kernGemm // pointwise 1×1 convolutions (no bias)
	tail    *graph.Exec   // (backbone output, conv11) -> [SSDAnchors, 5]
	p       *ssdParams
	backend compute.Backend
	anchors []float32 // [SSDAnchors][ymin, xmin, ymax, xmax]
	arenas  detArenas // backbone activation buffers, reused across passes
	par     *kernPar  // the backbone kernels' parallelism (eng's)
}

// ssdConv is a convolution with a per-channel bias (batch norm folded in).
type ssdConv struct {
	w, b *tfjs.Tensor
}

// ssdParams holds the folded weights of the whole network.
type ssdParams struct {
	conv0 ssdConv
	dw    [13]ssdConv // depthwise [3,3,C,1] with batch norm folded in
	pw    [13]ssdConv // pointwise [1,1,Cin,Cout]
	pred  [8]ssdConv  // Prediction/Conv2d_0..7
	heads [6]ssdConv  // fused box-encoding + face-logit predictors [1,1,C,5A]
}

// NewSSD loads ssd_mobilenetv1_model from modelDir (verified against the
// pinned sha256), folds the batch norms into the convolutions and prepares
// the network. Its last layers run as a GoMLX graph on eng; nil means a
// new default engine of its own (see engine.OrDefault). Its Go kernels
// run on up to eng.Parallelism() goroutines.
func NewSSD(modelDir string, eng *engine.Engine) (*SSD, error) {
	w, err := LoadWeights(modelDir, "ssd_mobilenetv1_model")
	if err != nil {
		return nil, err
	}
	p, anchors, err := ssdLoad(w)
	if err != nil {
		return nil, fmt.Errorf("nets: ssd_mobilenetv1_model: %w", err)
	}
	eng, err = engine.OrDefault(eng)
	if err != nil {
		return nil, err
	}
	be := eng.Backend()
	d := &SSD{p: p, backend: be, anchors: anchors, par: newKernPar(eng)}
	cw := p.conv0.w
	d.first = newKernGemm(cw.F32, cw.Shape[0]*cw.Shape[1]*cw.Shape[2], cw.Shape[3])
	for i := range d.pw {
		w := p.pw[i].w
		d.pw[i] = newKernGemm(w.F32, w.Shape[2], w.Shape[3])
	}
	if d.tail, err = graph.NewExec(be, func(x, conv11 *graph.Node) *graph.Node {
		return ssdTail(x, conv11, p)
	}); err != nil {
		return nil, fmt.Errorf("nets: building the SSD graph: %w", err)
	}
	return d, nil
}

// ssdLoad reads and folds the weights.
func ssdLoad(w *tfjs.Weights) (*ssdParams, []float32, error) {
	wi := &weightsIn{w: w}
	p := &ssdParams{}
	p.conv0 = ssdConv{wi.get("MobilenetV1/Conv2d_0_pointwise/weights", 3, 3, 3, 32),
		wi.get("MobilenetV1/Conv2d_0_pointwise/convolution_bn_offset", 32)}
	chans := []int{32, 64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024}
	for i := 0; i < 13; i++ {
		cin, cout := chans[i], chans[i+1]
		dp := fmt.Sprintf("MobilenetV1/Conv2d_%d_depthwise/", i+1)
		pp := fmt.Sprintf("MobilenetV1/Conv2d_%d_pointwise/", i+1)
		p.dw[i] = foldBatchNorm(
			wi.get(dp+"depthwise_weights", 3, 3, cin, 1),
			wi.get(dp+"BatchNorm/gamma", cin), wi.get(dp+"BatchNorm/beta", cin),
			wi.get(dp+"BatchNorm/moving_mean", cin), wi.get(dp+"BatchNorm/moving_variance", cin))
		p.pw[i] = ssdConv{wi.get(pp+"weights", 1, 1, cin, cout), wi.get(pp+"convolution_bn_offset", cout)}
	}
	predShapes := [8][3]int{{1, 1024, 256}, {3, 256, 512}, {1, 512, 128}, {3, 128, 256},
		{1, 256, 128}, {3, 128, 256}, {1, 256, 64}, {3, 64, 128}}
	for i, s := range predShapes {
		pp := fmt.Sprintf("Prediction/Conv2d_%d_pointwise/", i)
		p.pred[i] = ssdConv{wi.get(pp+"weights", s[0], s[0], s[1], s[2]), wi.get(pp+"convolution_bn_offset", s[2])}
	}
	headIn := [6]int{512, 1024, 512, 256, 256, 128}
	for i, c := range headIn {
		a := 6
		if i == 0 {
			a = 3
		}
		bp := fmt.Sprintf("Prediction/BoxPredictor_%d/", i)
		p.heads[i] = fuseHead(c, a,
			wi.get(bp+"BoxEncodingPredictor/weights", 1, 1, c, 4*a), wi.get(bp+"BoxEncodingPredictor/biases", 4*a),
			wi.get(bp+"ClassPredictor/weights", 1, 1, c, 3*a), wi.get(bp+"ClassPredictor/biases", 3*a))
	}
	anchors := wi.get("Output/extra_dim", 1, SSDAnchors, 4)
	if wi.err != nil {
		return nil, nil, wi.err
	}
	return p, anchors.F32, nil
}

// foldBatchNorm folds inference batch norm into a depthwise filter
// [k,k,C,1]: scale = gamma/sqrt(var+eps), w' = w·scale, b' = beta - mean·scale.
func foldBatchNorm(w, gamma, beta, mean, variance *tfjs.Tensor) ssdConv {
	c := gamma.Size()
	scale := make([]float64, c)
	bias := make([]float32, c)
	for i := range scale {
		scale[i] = float64(gamma.F32[i]) / math.Sqrt(float64(variance.F32[i])+ssdBNEpsilon)
		bias[i] = float32(float64(beta.F32[i]) - float64(mean.F32[i])*scale[i])
	}
	fw := make([]float32, len(w.F32))
	for i, v := range w.F32 {
		fw[i] = float32(float64(v) * scale[i%c])
	}
	return ssdConv{
		w: &tfjs.Tensor{Name: w.Name, Shape: w.Shape, DType: tfjs.Float32, F32: fw},
		b: &tfjs.Tensor{Name: beta.Name, Shape: []int{c}, DType: tfjs.Float32, F32: bias},
	}
}

// fuseHead merges a box predictor's box-encoding conv (4 outputs per anchor)
// and the face logit of its class conv (output 1 of 3 per anchor) into one
// 1×1 conv with 5 outputs per anchor: [ty, tx, th, tw, logit].
func fuseHead(c, a int, bw, bb, cw, cb *tfjs.Tensor) ssdConv {
	n := 5 * a
	w := make([]float32, c*n)
	b := make([]float32, n)
	for k := 0; k < a; k++ {
		for j := 0; j < 4; j++ {
			b[5*k+j] = bb.F32[4*k+j]
			for i := 0; i < c; i++ {
				w[i*n+5*k+j] = bw.F32[i*4*a+4*k+j]
			}
		}
		b[5*k+4] = cb.F32[3*k+1]
		for i := 0; i < c; i++ {
			w[i*n+5*k+4] = cw.F32[i*3*a+3*k+1]
		}
	}
	return ssdConv{
		w: &tfjs.Tensor{Shape: []int{1, 1, c, n}, DType: tfjs.Float32, F32: w},
		b: &tfjs.Tensor{Shape: []int{n}, DType: tfjs.Float32, F32: b},
	}
}

// ssdTail builds the prediction layers and box heads on the backbone output
// x [1,16,16,1024] and conv11 [1,32,32,512] (both after relu6) and returns
// [SSDAnchors, 5]: box encodings and face logit per anchor.
func ssdTail(x, conv11 *graph.Node, p *ssdParams) *graph.Node {
	g := x.Graph()
	conv := func(x *graph.Node, c ssdConv, s int) *graph.Node {
		return graph.ClipScalar(conv2d(x, constant(g, c.w), constant(g, c.b), s, Same), 0, 6)
	}
	c0 := conv(x, p.pred[0], 1)
	c1 := conv(c0, p.pred[1], 2)
	c2 := conv(c1, p.pred[2], 1)
	c3 := conv(c2, p.pred[3], 2)
	c4 := conv(c3, p.pred[4], 1)
	c5 := conv(c4, p.pred[5], 2)
	c6 := conv(c5, p.pred[6], 1)
	c7 := conv(c6, p.pred[7], 2)
	feats := []*graph.Node{conv11, x, c1, c3, c5, c7}
	outs := make([]*graph.Node, len(feats))
	for i, f := range feats {
		h := p.heads[i]
		outs[i] = graph.Reshape(conv2d(f, constant(g, h.w), constant(g, h.b), 1, Valid), -1, 5)
	}
	return graph.Concatenate(outs, 0)
}

func (d *SSD) newShared(dims ...int) (*tensors.Tensor, []float32, error) {
	return detShared(d.backend, dims...)
}

// forward runs the network on a 512×512×3 input of 0..255 values and
// returns [SSDAnchors][5] (box encodings, face logit).
func (d *SSD) forward(in *imaging.Float) ([]float32, error) {
	p := d.p
	ar := d.arenas.get()
	defer d.arenas.put(ar)
	norm := ar.get(len(in.Pix))
	for i, v := range in.Pix {
		norm[i] = v/127.5 - 1
	}
	h, _, _ := outSize(in.H, 3, 2, Same)
	w, _, _ := outSize(in.W, 3, 2, Same)
	c := p.conv0.w.Shape[3]
	cols := ar.get(h * w * 9 * in.C)
	kernIm2col(d.par, cols, norm, 1, in.H, in.W, in.C, 3, 2, Same)
	cur := ar.get(h * w * c)
	d.first.mul(d.par, cur, cols, h*w)
	bias := p.conv0.b.F32
	var conv11 []float32
	for i := 0; i < 13; i++ {
		s := 1
		switch i + 1 {
		case 2, 4, 6, 12:
			s = 2
		}
		oh, _, _ := outSize(h, 3, s, Same)
		ow, _, _ := outSize(w, 3, s, Same)
		detBiasRelu6(d.par, cur, bias)
		if i+1 == 12 {
			// The input of block 12 is conv11, which feeds box predictor 0.
			conv11 = cur
		}
		dw := ar.get(oh * ow * c)
		ssdDepthwise3x3(d.par, dw, cur, h, w, c, s, p.dw[i].w.F32, p.dw[i].b.F32, true)
		cout := p.pw[i].w.Shape[3]
		cur = ar.get(oh * ow * cout)
		d.pw[i].mul(d.par, cur, dw, oh*ow)
		bias = p.pw[i].b.F32
		h, w, c = oh, ow, cout
	}
	detBiasRelu6(d.par, cur, bias)
	last, lastFlat, err := d.newShared(1, h, w, c)
	if err != nil {
		return nil, err
	}
	copy(lastFlat, cur)
	c11, c11Flat, err := d.newShared(1, 32, 32, 512)
	if err != nil {
		_ = last.FinalizeAll()
		return nil, err
	}
	if len(conv11) != len(c11Flat) {
		_ = last.FinalizeAll()
		_ = c11.FinalizeAll()
		return nil, fmt.Errorf("nets: SSD conv11 has %d values, want %d (input not 512×512?)", len(conv11), len(c11Flat))
	}
	copy(c11Flat, conv11)
	out, err := d.tail.Call(last, c11)
	_ = last.FinalizeAll()
	_ = c11.FinalizeAll()
	if err != nil {
		return nil, fmt.Errorf("nets: running SSD: %w", err)
	}
	return detFetch(out[0])
}

// Raw runs the network on a 512×512 input of 0..255 values and returns the
// face score (sigmoid of class logit 1) of each of the 5118 anchors and the
// decoded boxes [ymin, xmin, ymax, xmax] relative to the input square.
func (d *SSD) Raw(in *imaging.Float) (scores []float32, boxes [][4]float32, err error) {
	if err := detCheckFloat(in, SSDInputSize); err != nil {
		return nil, nil, err
	}
	raw, err := d.forward(in)
	if err != nil {
		return nil, nil, err
	}
	if len(raw) != 5*SSDAnchors {
		return nil, nil, fmt.Errorf("nets: SSD produced %d values, want %d", len(raw), 5*SSDAnchors)
	}
	scores = make([]float32, SSDAnchors)
	boxes = make([][4]float32, SSDAnchors)
	for i := range scores {
		r := raw[5*i : 5*i+5]
		a := d.anchors[4*i : 4*i+4]
		scores[i] = float32(detSigmoid(float64(r[4])))
		ha, wa := float64(a[2]-a[0]), float64(a[3]-a[1])
		ya, xa := float64(a[0])+ha/2, float64(a[1])+wa/2
		cy := float64(r[0])/10*ha + ya
		cx := float64(r[1])/10*wa + xa
		hh := math.Exp(float64(r[2])/5) * ha / 2
		hw := math.Exp(float64(r[3])/5) * wa / 2
		boxes[i] = [4]float32{float32(cy - hh), float32(cx - hw), float32(cy + hh), float32(cx + hw)}
	}
	return scores, boxes, nil
}

// Detect finds faces in img as face-api's SsdMobilenetv1.locateFaces does:
// pad bottom/right to a square, resize to 512, x/127.5-1, run the network,
// decode the anchors, keep scores above MinScore, NMS, and map the boxes
// back to pixels of img. As in face-api, boxes are clipped to the padded
// square (so never extend above or left of the image) but may reach into
// the padding at the bottom or right by the box's own overshoot.
func (d *SSD) Detect(img *imaging.RGB, opt SSDOptions) ([]Detection, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := detCheckImage(img); err != nil {
		return nil, err
	}
	in, err := detInput(img, SSDInputSize)
	if err != nil {
		return nil, err
	}
	scores, boxes, err := d.Raw(in)
	if err != nil {
		return nil, err
	}
	rw, rh := detReshaped(img.W, img.H, SSDInputSize)
	return ssdSelect(scores, boxes, opt, rw, rh, img.W, img.H), nil
}

// ssdSelect applies the score filter and NMS and maps the kept boxes to
// pixels of a w×h image whose reshaped size in the input square is rw×rh.
func ssdSelect(scores []float32, boxes [][4]float32, opt SSDOptions, rw, rh, w, h int) []Detection {
	bx := make([]detBox, len(boxes))
	sc := make([]float64, len(scores))
	for i, b := range boxes {
		bx[i] = detBox{float64(b[1]), float64(b[0]), float64(b[3]), float64(b[2])}
		sc[i] = float64(scores[i])
	}
	keep := detNMS(bx, sc, opt.MinScore, opt.IoU, min(opt.MaxResults, len(boxes)), false)
	padX := float64(SSDInputSize) / float64(rw)
	padY := float64(SSDInputSize) / float64(rh)
	out := make([]Detection, len(keep))
	for i, k := range keep {
		b := boxes[k]
		top := math.Max(0, float64(b[0])) * padY
		bottom := math.Min(1, float64(b[2])) * padY
		left := math.Max(0, float64(b[1])) * padX
		right := math.Min(1, float64(b[3])) * padX
		out[i] = Detection{
			X: left * float64(w), Y: top * float64(h),
			W: (right - left) * float64(w), H: (bottom - top) * float64(h),
			Score: sc[k],
		}
	}
	return out
}
