package nets

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/internal/vec"
)

// Detection is a face found by a detector, in pixels of the original image.
type Detection struct {
	X, Y, W, H float64
	Score      float64
}

// Right returns the x coordinate of the right edge.
func (d Detection) Right() float64 { return d.X + d.W }

// Bottom returns the y coordinate of the bottom edge.
func (d Detection) Bottom() float64 { return d.Y + d.H }

// box is an axis-aligned box given by its corners.
type detBox struct{ x0, y0, x1, y1 float64 }

// iou is the intersection over union of two boxes as face-api computes it
// for SSD (ops inside ssdMobilenetv1/nonMaxSuppression.ts): corners are
// sorted first and a box of non-positive area has IoU 0 with everything.
func detIoU(a, b detBox) float64 {
	ax0, ax1 := math.Min(a.x0, a.x1), math.Max(a.x0, a.x1)
	ay0, ay1 := math.Min(a.y0, a.y1), math.Max(a.y0, a.y1)
	bx0, bx1 := math.Min(b.x0, b.x1), math.Max(b.x0, b.x1)
	by0, by1 := math.Min(b.y0, b.y1), math.Max(b.y0, b.y1)
	areaA := (ax1 - ax0) * (ay1 - ay0)
	areaB := (bx1 - bx0) * (by1 - by0)
	if areaA <= 0 || areaB <= 0 {
		return 0
	}
	iw := math.Max(math.Min(ax1, bx1)-math.Max(ax0, bx0), 0)
	ih := math.Max(math.Min(ay1, by1)-math.Max(ay0, by0), 0)
	inter := iw * ih
	return inter / (areaA + areaB - inter)
}

// nms is greedy non-maximum suppression: candidates with score above
// minScore are visited by decreasing score and kept unless they overlap an
// already kept box by IoU > iouThr; at most maxOut are kept (maxOut <= 0:
// no limit). Equal scores are visited in index order, or in reverse index
// order when laterFirst is set (face-api's tiny detector sorts ascending and
// pops from the end). It returns the kept indices in the order they were
// chosen.
func detNMS(boxes []detBox, scores []float64, minScore, iouThr float64, maxOut int, laterFirst bool) []int {
	cand := make([]int, 0, 64)
	for i, s := range scores {
		if s > minScore {
			cand = append(cand, i)
		}
	}
	sort.SliceStable(cand, func(a, b int) bool {
		sa, sb := scores[cand[a]], scores[cand[b]]
		if sa != sb {
			return sa > sb
		}
		if laterFirst {
			return cand[a] > cand[b]
		}
		return false
	})
	var kept []int
	for _, c := range cand {
		if maxOut > 0 && len(kept) >= maxOut {
			break
		}
		ok := true
		for j := len(kept) - 1; j >= 0; j-- {
			if detIoU(boxes[c], boxes[kept[j]]) > iouThr {
				ok = false
				break
			}
		}
		if ok {
			kept = append(kept, c)
		}
	}
	return kept
}

// NMS applies greedy non-maximum suppression to detections: by decreasing
// score (ties in input order), a detection is dropped when its IoU with an
// already kept one exceeds iouThreshold. At most maxResults are returned
// (maxResults <= 0: no limit). Detections with non-positive area never
// suppress or get suppressed.
func NMS(dets []Detection, iouThreshold float64, maxResults int) ([]Detection, error) {
	if math.IsNaN(iouThreshold) || iouThreshold < 0 || iouThreshold > 1 {
		return nil, fmt.Errorf("nets: NMS IoU threshold %v outside [0,1]", iouThreshold)
	}
	boxes := make([]detBox, len(dets))
	scores := make([]float64, len(dets))
	for i, d := range dets {
		boxes[i] = detBox{d.X, d.Y, d.X + d.W, d.Y + d.H}
		scores[i] = d.Score
	}
	idx := detNMS(boxes, scores, math.Inf(-1), iouThreshold, maxResults, false)
	out := make([]Detection, len(idx))
	for i, k := range idx {
		out[i] = dets[k]
	}
	return out, nil
}

// detReshaped is face-api's computeReshapedDimensions: the size the image
// occupies inside the inputSize square after scaling its longer side to
// inputSize.
func detReshaped(w, h, inputSize int) (rw, rh int) {
	scale := float64(inputSize) / float64(max(w, h))
	return int(math.Round(float64(w) * scale)), int(math.Round(float64(h) * scale))
}

// detCheckImage validates an input photo.
func detCheckImage(img *imaging.RGB) error {
	if img == nil {
		return fmt.Errorf("nets: nil image")
	}
	if img.W <= 0 || img.H <= 0 || len(img.Pix) != 3*img.W*img.H {
		return fmt.Errorf("nets: malformed image %dx%d with %d bytes", img.W, img.H, len(img.Pix))
	}
	return nil
}

// detCheckFloat validates a network input of the given square size.
func detCheckFloat(in *imaging.Float, size int) error {
	if in == nil {
		return fmt.Errorf("nets: nil input")
	}
	if in.W != size || in.H != size || in.C != 3 || len(in.Pix) != size*size*3 {
		return fmt.Errorf("nets: input is %dx%dx%d with %d values, want %dx%dx3", in.W, in.H, in.C, len(in.Pix), size, size)
	}
	return nil
}

// detInput is face-api's toBatchTensor(size, false) for one image: pad at
// the bottom/right to a square and resize to size×size with TensorFlow's
// bilinear resize (alignCorners=false, halfPixelCenters=false). It is fused:
// it reads the 8-bit pixels directly and treats the padding as zeros, which
// gives bit for bit what imaging.PadToSquare followed by
// imaging.ResizeBilinear give (see TestDetInputMatchesImaging) without
// materialising the padded float square (44 MB for a 1920-px photo).
func detInput(img *imaging.RGB, size int) (*imaging.Float, error) {
	if err := detCheckImage(img); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("nets: network input size %d", size)
	}
	side := max(img.W, img.H)
	scale := float64(side) / float64(size)
	out := imaging.NewFloat(size, size, 3)
	// Column geometry: source columns beyond the image read as zero (-1).
	x0s := make([]int, size)
	x1s := make([]int, size)
	xfs := make([]float64, size)
	for c := range size {
		f := scale * float64(c)
		x0 := math.Floor(f)
		x0s[c], x1s[c], xfs[c] = int(x0), min(side-1, int(math.Ceil(f))), f-x0
		if x0s[c] >= img.W {
			x0s[c] = -1
		}
		if x1s[c] >= img.W {
			x1s[c] = -1
		}
	}
	zero := make([]uint8, 3*img.W)
	row := func(y int) []uint8 {
		if y >= img.H {
			return zero
		}
		return img.Pix[3*y*img.W : 3*(y+1)*img.W]
	}
	px := func(r []uint8, x, d int) float64 {
		if x < 0 {
			return 0
		}
		return float64(r[3*x+d])
	}
	o := 0
	for r := range size {
		f := scale * float64(r)
		y0f := math.Floor(f)
		yf := f - y0f
		top, bot := row(int(y0f)), row(min(side-1, int(math.Ceil(f))))
		for c := range size {
			a, b, xf := x0s[c], x1s[c], xfs[c]
			for d := range 3 {
				tl, tr := px(top, a, d), px(top, b, d)
				bl, br := px(bot, a, d), px(bot, b, d)
				t := tl + (tr-tl)*xf
				bo := bl + (br-bl)*xf
				out.Pix[o+d] = float32(t + (bo-t)*yf)
			}
			o += 3
		}
	}
	return out, nil
}

// detFetch copies a float32 output tensor and releases it.
func detFetch(t *tensors.Tensor) ([]float32, error) {
	v, err := tensors.CopyFlatData[float32](t)
	_ = t.FinalizeAll()
	if err != nil {
		return nil, fmt.Errorf("nets: reading network output: %w", err)
	}
	return v, nil
}

// detShared returns a float32 tensor of the given dimensions whose memory
// the pure-Go backend uses directly (a shared buffer), so Go code can fill
// it without an extra copy, and its flat data.
func detShared(be compute.Backend, dims ...int) (*tensors.Tensor, []float32, error) {
	t, err := tensors.FromShapeForBackend(be, 0, shapes.Make(dtypes.Float32, dims...))
	if err != nil {
		return nil, nil, fmt.Errorf("nets: allocating a %v activation: %w", dims, err)
	}
	var flat []float32
	if err := tensors.MutableFlatData(t, func(f []float32) { flat = f }); err != nil {
		return nil, nil, fmt.Errorf("nets: allocating a %v activation: %w", dims, err)
	}
	return t, flat, nil
}

// kernPar is the parallelism of one network's Go kernels: each parallel
// loop runs on at most workers goroutines, the Parallelism of the engine
// the network was given (see newKernPar). Each index of a loop is computed
// the same way whatever the split, so outputs do not depend on workers.
type kernPar struct {
	workers int
	// started, when set (by tests), is called after each parallel loop
	// with the number of goroutines the loop ran on.
	started func(goroutines int)
}

// newKernPar returns the parallelism of eng, or, when eng is nil, the
// default (engine.Parallelism, one worker per GOMAXPROCS).
func newKernPar(eng *engine.Engine) *kernPar {
	if eng == nil {
		return &kernPar{workers: engine.Parallelism()}
	}
	return &kernPar{workers: eng.Parallelism()}
}

// kernParMinWork is the least total work (scalar operations) a loop must
// hold to be split over goroutines.
const kernParMinWork = 1 << 17

// For splits [0, n) into contiguous ranges and runs fn on them
// concurrently, on at most p.workers goroutines (see vec.ParallelFor), when
// the total work (n·perItem scalar operations) is large enough to pay for
// the goroutines; otherwise it calls fn(0, n).
func (p *kernPar) For(n, perItem int, fn func(lo, hi int)) {
	workers := p.workers
	if n*perItem < kernParMinWork {
		workers = 1
	}
	if p.started == nil {
		vec.ParallelFor(n, workers, fn)
		return
	}
	var ranges atomic.Int64
	vec.ParallelFor(n, workers, func(lo, hi int) {
		ranges.Add(1)
		fn(lo, hi)
	})
	p.started(int(ranges.Load()))
}

// detArena hands out the activation buffers of one pass (a detector's, or
// kernWS's for the other networks), reused
// from pass to pass: a fresh buffer per layer cost a tenth of a tiny
// detector pass in zeroing alone (runtime.memclrNoHeapPointers in pprof of
// BenchmarkTiny/raw416). Buffers are not zeroed; every kernel that fills
// one writes all of it.
type detArena struct {
	bufs [][]float32
	next int
}

// get returns the pass's next buffer, of n values.
func (a *detArena) get(n int) []float32 {
	if a.next == len(a.bufs) {
		a.bufs = append(a.bufs, nil)
	}
	b := a.bufs[a.next]
	if cap(b) < n {
		b = make([]float32, n)
		a.bufs[a.next] = b
	}
	a.next++
	return b[:n]
}

// detArenas keeps idle arenas of one network for reuse; it is safe for
// concurrent use (each pass takes an arena of its own).
type detArenas struct{ pool sync.Pool }

// get returns an arena whose buffers the caller owns until put.
func (p *detArenas) get() *detArena {
	if a, ok := p.pool.Get().(*detArena); ok {
		a.next = 0
		return a
	}
	return &detArena{}
}

// put returns a to the pool; no buffer it handed out may be used after.
func (p *detArenas) put(a *detArena) { p.pool.Put(a) }
