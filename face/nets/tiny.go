package nets

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/face/tfjs"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// tinyAnchors are the five anchor sizes (width, height) of face-api's tiny
// face detector, in grid cells.
var tinyAnchors = [5][2]float64{
	{1.603231, 2.094468},
	{6.041143, 7.080126},
	{2.882459, 3.518061},
	{4.266906, 5.178857},
	{9.041765, 10.66308},
}

// tinyMeanRGB is subtracted from the 0..255 input before dividing by 255.
var tinyMeanRGB = [3]float32{117.001, 114.697, 97.404}

// TinyOptions configures Tiny.Detect. Zero fields take face-api's defaults.
type TinyOptions struct {
	// InputSize is the side of the square network input, a positive multiple
	// of 32 (default 416).
	InputSize int
	// ScoreThreshold keeps boxes whose objectness is above it (default 0.5).
	ScoreThreshold float64
	// IoU is the non-maximum-suppression threshold (default 0.4).
	IoU float64
}

// withDefaults fills zero fields and validates the options.
func (o TinyOptions) withDefaults() (TinyOptions, error) {
	if o.InputSize == 0 {
		o.InputSize = 416
	}
	if o.ScoreThreshold == 0 {
		o.ScoreThreshold = 0.5
	}
	if o.IoU == 0 {
		o.IoU = 0.4
	}
	if o.InputSize < 32 || o.InputSize%32 != 0 || o.InputSize > 4096 {
		return o, fmt.Errorf("nets: tiny detector input size %d is not a multiple of 32 in [32,4096]", o.InputSize)
	}
	if !(o.ScoreThreshold > 0 && o.ScoreThreshold < 1) {
		return o, fmt.Errorf("nets: tiny detector score threshold %v outside (0,1)", o.ScoreThreshold)
	}
	if !(o.IoU > 0 && o.IoU <= 1) {
		return o, fmt.Errorf("nets: tiny detector IoU threshold %v outside (0,1]", o.IoU)
	}
	return o, nil
}

// Tiny is face-api's tiny face detector (a Tiny-YOLOv2 with depthwise
// separable convolutions, 5 anchors, one class).
//
// A pass runs as Go kernels: the first 3×3 convolution with its pooling
// (tinyConv0Pool), the depthwise convolutions (ssdDepthwise3x3), the
// pointwise convolutions and the 1×1 head as matrix products (kernGemm),
// biases, leaky ReLUs and max-pools. (They were GoMLX executions; on the
// pure-Go backend those cost about twice as much on these shapes, see
// BenchmarkKernGemm.)
//
// A Tiny is safe for concurrent use: the weights are shared and read-only
// and each call allocates its own activations, so two goroutines detecting
// on two images use two cores.
type Tiny struct {
	conv0w []float32    // conv0's 3×3×3×16 filter (HWIO); see tinyConv0Pool
	conv0b []float32    // conv0's bias
	pw     [5]*kernGemm // pointwise 1×1 convolutions (no bias)
	head   *kernGemm    // conv8 1×1 (its bias is headB)
	headB  []float32
	seps   [5]tinySep
	zeros  []float32 // depthwise bias (none): 512 zeros
	arenas detArenas // activation buffers, reused across passes
	par    *kernPar  // the kernels' parallelism (the engine's)
}

// tinySep holds one depthwise-separable block.
type tinySep struct {
	dw, pw, bias *tfjs.Tensor
}

// NewTiny loads tiny_face_detector_model from modelDir (verified against the
// pinned sha256) and prepares the network. Its kernels run on up to
// eng.Parallelism() goroutines; nil means the default (engine.Parallelism).
func NewTiny(modelDir string, eng *engine.Engine) (*Tiny, error) {
	w, err := LoadWeights(modelDir, "tiny_face_detector_model")
	if err != nil {
		return nil, err
	}
	wi := &weightsIn{w: w}
	conv0w := wi.get("conv0/filters", 3, 3, 3, 16)
	conv0b := wi.get("conv0/bias", 16)
	chans := []int{16, 32, 64, 128, 256, 512}
	d := &Tiny{zeros: make([]float32, 512), par: newKernPar(eng)}
	for i := range d.seps {
		cin, cout := chans[i], chans[i+1]
		p := fmt.Sprintf("conv%d/", i+1)
		d.seps[i] = tinySep{
			dw:   wi.get(p+"depthwise_filter", 3, 3, cin, 1),
			pw:   wi.get(p+"pointwise_filter", 1, 1, cin, cout),
			bias: wi.get(p+"bias", cout),
		}
	}
	conv8w := wi.get("conv8/filters", 1, 1, 512, 25)
	conv8b := wi.get("conv8/bias", 25)
	if wi.err != nil {
		return nil, fmt.Errorf("nets: tiny_face_detector_model: %w", wi.err)
	}
	d.conv0w, d.conv0b = conv0w.F32, conv0b.F32
	for i := range d.pw {
		pw := d.seps[i].pw
		d.pw[i] = newKernGemm(pw.F32, pw.Shape[2], pw.Shape[3])
	}
	d.head, d.headB = newKernGemm(conv8w.F32, 512, 25), conv8b.F32
	return d, nil
}

// forward runs the network on a square input (side a multiple of 32) and
// returns the raw output grid.
func (d *Tiny) forward(in *imaging.Float) []float32 {
	// conv0 and its pooling are one kernel; each block below pools the
	// previous block's pointwise output.
	ar := d.arenas.get()
	defer d.arenas.put(ar)
	x, h, w := tinyConv0Pool(d.par, ar, in.Pix, in.H, in.W, d.conv0w, d.conv0b)
	c := tinyConv0Out
	for i := range d.seps {
		dw := ar.get(h * w * c)
		ssdDepthwise3x3(d.par, dw, x, h, w, c, 1, d.seps[i].dw.F32, d.zeros[:c], false)
		cout := d.seps[i].pw.Shape[3]
		y := ar.get(h * w * cout)
		d.pw[i].mul(d.par, y, dw, h*w)
		c = cout
		// Max-pool 2×2 (stride 2, the last one stride 1) of the pointwise
		// output, then its bias and leaky ReLU: both are per-channel
		// monotonic, so pooling first gives the same values on a quarter
		// of the pixels.
		s := 2
		if i == len(d.seps)-1 {
			s = 1
		}
		ph, _, _ := outSize(h, 2, s, Same)
		pw, _, _ := outSize(w, 2, s, Same)
		x = ar.get(ph * pw * c)
		tinyPoolBiasLeaky(d.par, x, y, h, w, c, s, d.seps[i].bias.F32)
		h, w = ph, pw
	}
	out := make([]float32, h*w*len(d.headB))
	d.head.mul(d.par, out, x, h*w)
	for p := 0; p < len(out); p += len(d.headB) {
		detAdd(out[p:p+len(d.headB)], d.headB)
	}
	return out
}

// tinyPoolBiasLeaky writes into out the 2×2 max-pool with stride s and
// TensorFlow SAME padding (padded cells ignored) of in ([h][w][c]), plus the
// per-channel bias b, through a leaky ReLU of slope 0.1.
func tinyPoolBiasLeaky(par *kernPar, out, in []float32, h, w, c, s int, b []float32) {
	oh, _, _ := outSize(h, 2, s, Same)
	ow, _, _ := outSize(w, 2, s, Same)
	b = b[:c]
	par.For(oh, ow*c*4, func(lo, hi int) {
		for oy := lo; oy < hi; oy++ {
			y0 := oy * s
			y1 := min(y0+1, h-1)
			for ox := 0; ox < ow; ox++ {
				x0 := ox * s
				x1 := min(x0+1, w-1)
				o := out[(oy*ow+ox)*c : (oy*ow+ox+1)*c]
				p00 := in[(y0*w+x0)*c : (y0*w+x0+1)*c]
				p01 := in[(y0*w+x1)*c : (y0*w+x1+1)*c]
				p10 := in[(y1*w+x0)*c : (y1*w+x0+1)*c]
				p11 := in[(y1*w+x1)*c : (y1*w+x1+1)*c]
				for k := range o {
					v := max(p00[k], p01[k], p10[k], p11[k]) + b[k]
					o[k] = max(v, v*0.1)
				}
			}
		}
	})
}

// Raw runs the network on a square input of 0..255 values whose side is a
// multiple of 32 and returns the output grid, row-major
// [cells][cells][5 anchors][tx, ty, tw, th, objectness logit] (13×13×25 for
// an input of 416).
func (d *Tiny) Raw(in *imaging.Float) ([]float32, error) {
	if in == nil {
		return nil, fmt.Errorf("nets: nil input")
	}
	if in.W < 32 || in.W%32 != 0 {
		return nil, fmt.Errorf("nets: tiny detector input width %d is not a positive multiple of 32", in.W)
	}
	if err := detCheckFloat(in, in.W); err != nil {
		return nil, err
	}
	return d.forward(in), nil
}

// Detect finds faces in img as face-api's TinyFaceDetector.locateFaces does:
// pad bottom/right to a square, resize to InputSize, run the network, decode
// the anchors, keep scores above ScoreThreshold and apply NMS. Boxes are in
// pixels of img and, as in face-api, not clipped to the image.
func (d *Tiny) Detect(img *imaging.RGB, opt TinyOptions) ([]Detection, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := detCheckImage(img); err != nil {
		return nil, err
	}
	in, err := detInput(img, opt.InputSize)
	if err != nil {
		return nil, err
	}
	grid, err := d.Raw(in)
	if err != nil {
		return nil, err
	}
	rw, rh := detReshaped(img.W, img.H, opt.InputSize)
	return tinyDecode(grid, opt, rw, rh, img.W, img.H), nil
}

// tinyDecode turns the raw grid into detections in pixels of a w×h image
// whose reshaped size inside the input square is rw×rh.
func tinyDecode(grid []float32, opt TinyOptions, rw, rh, w, h int) []Detection {
	cells := opt.InputSize / 32
	size := float64(max(rw, rh))
	cfx, cfy := size/float64(rw), size/float64(rh)
	var boxes []detBox
	var scores []float64
	var rel []detBox
	for row := 0; row < cells; row++ {
		for col := 0; col < cells; col++ {
			for a := 0; a < 5; a++ {
				v := grid[((row*cells+col)*5+a)*5:]
				score := detSigmoid(float64(v[4]))
				if !(score > opt.ScoreThreshold) {
					continue
				}
				n := float64(cells)
				ctX := (float64(col) + detSigmoid(float64(v[0]))) / n * cfx
				ctY := (float64(row) + detSigmoid(float64(v[1]))) / n * cfy
				bw := math.Exp(float64(v[2])) * tinyAnchors[a][0] / n * cfx
				bh := math.Exp(float64(v[3])) * tinyAnchors[a][1] / n * cfy
				x, y := ctX-bw/2, ctY-bh/2
				r := detBox{x, y, x + bw, y + bh}
				rel = append(rel, r)
				s := float64(opt.InputSize)
				boxes = append(boxes, detBox{r.x0 * s, r.y0 * s, r.x1 * s, r.y1 * s})
				scores = append(scores, score)
			}
		}
	}
	keep := detNMS(boxes, scores, math.Inf(-1), opt.IoU, 0, true)
	out := make([]Detection, len(keep))
	for i, k := range keep {
		r := rel[k]
		out[i] = Detection{
			X: r.x0 * float64(w), Y: r.y0 * float64(h),
			W: (r.x1 - r.x0) * float64(w), H: (r.y1 - r.y0) * float64(h),
			Score: scores[k],
		}
	}
	return out
}

func detSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
