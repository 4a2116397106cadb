package nets

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/core/graph"

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
// A Tiny is safe for concurrent use: the compiled graph (one per input size,
// compiled on first use) is shared, and each call runs its own execution, so
// two goroutines detecting on two images use two cores.
type Tiny struct {
	exec *graph.Exec
}

// tinySep holds one depthwise-separable block.
type tinySep struct {
	dw, pw, bias *tfjs.Tensor
}

// NewTiny loads tiny_face_detector_model from modelDir (verified against the
// pinned sha256) and prepares the network.
func NewTiny(modelDir string) (*Tiny, error) {
	w, err := LoadWeights(modelDir, "tiny_face_detector_model")
	if err != nil {
		return nil, err
	}
	wi := &weightsIn{w: w}
	conv0w := wi.get("conv0/filters", 3, 3, 3, 16)
	conv0b := wi.get("conv0/bias", 16)
	chans := []int{16, 32, 64, 128, 256, 512}
	seps := make([]tinySep, 5)
	for i := range seps {
		cin, cout := chans[i], chans[i+1]
		p := fmt.Sprintf("conv%d/", i+1)
		seps[i] = tinySep{
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
	be, err := engine.Backend()
	if err != nil {
		return nil, err
	}
	build := func(x *graph.Node) *graph.Node {
		g := x.Graph()
		mean := graph.Const(g, []float32{tinyMeanRGB[0], tinyMeanRGB[1], tinyMeanRGB[2]})
		x = graph.DivScalar(graph.Sub(x, graph.Reshape(mean, 1, 1, 1, 3)), 255)
		x = detLeaky(detConv(x, conv0w, conv0b, 1, Valid))
		for _, s := range seps {
			x = maxPool(x, 2, 2, Same)
			x = tinySeparable(x, s)
		}
		x = maxPool(x, 2, 1, Same)
		return detConv(x, conv8w, conv8b, 1, Valid)
	}
	exec, err := graph.NewExec(be, build)
	if err != nil {
		return nil, fmt.Errorf("nets: building the tiny detector graph: %w", err)
	}
	return &Tiny{exec: exec.WithName("TinyFaceDetector")}, nil
}

// tinySeparable is depthwise 3×3 SAME, pointwise 1×1, bias, detLeaky ReLU.
func tinySeparable(x *graph.Node, s tinySep) *graph.Node {
	x = detDepthwise(x, s.dw, nil, 1, Same)
	return detLeaky(detConv(x, s.pw, s.bias, 1, Valid))
}

// detLeaky is detLeaky ReLU with slope 0.1.
func detLeaky(x *graph.Node) *graph.Node {
	return graph.Max(x, graph.MulScalar(x, 0.1))
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
	out, err := d.exec.Exec(detTensor(in))
	if err != nil {
		return nil, fmt.Errorf("nets: running the tiny detector: %w", err)
	}
	return detFetch(out[0])
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
