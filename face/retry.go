package face

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
)

// RetryPad is the border the second detection pass adds on every side of a
// photo in which the first pass found no face, as a fraction of the
// photo's width (left and right) and height (top and bottom).
//
// Both networks read a photo squeezed to a fixed input (SSD 512, tiny
// detector 416 pixels), so a face filling much of a tight crop — LFW's
// deep-funnelled photos, a portrait — reaches them larger than most faces
// they were trained on, with its outline cut by the photo's edges. With a mid-grey border the face is smaller and whole. The
// border was chosen on LFW's development training photos (every 6th: 574,
// colour and grey copies; DefaultRule found no face in 12 colour and 44
// grey copies, and missed 3 and 2 more where it found another face): the
// second pass found the labelled face in 11 and 37 of those 56 with a
// border of 0.15, 12 and 38 with 0.25, 12 and 41 with 0.3 and 0.35, 12 and
// 42 with 0.4, 12 and 43 with 0.5, accepting 4, 2, 3, 2, 1 and 5 other
// faces; 0.4 does best counting found minus other faces. (Tinting a grey
// photo skin-coloured for SSD before the border recovered no more than a
// wider border.) On the left and right quarters of 47 of those photos
// (188 crops with the grey copies) the second pass found 6 faces with 0.4
// where the first found 1; the three looked at were people beside the
// subject (`veil bench detect --sides-every` measures this).
const RetryPad = 0.4

// retryMaxSide bounds the longer side of the padded photo of the second
// pass: the networks read at most 512 pixels, so a larger photo is first
// shrunk by an integer factor (box average), which keeps a 50-megapixel
// photo's second pass from allocating a copy larger still.
const retryMaxSide = 1024

// retryFill is the grey of the second pass's border: 128 is about zero
// after either network's normalisation.
const retryFill = 128

// Detections are both networks' detections on one photo as Detector Both
// runs them: the first pass on the photo, and, when that found no face,
// the second on the photo with a border (RetryPad). Boxes are in the
// photo's pixels.
type Detections struct {
	SSD  []nets.Detection
	Tiny []nets.Detection
	// Retry is the second pass, nil when it did not run.
	Retry *Detections
}

// Faces applies the rule to the first pass, and to the second when the
// first gives no face and the second ran; faces of the second pass are
// marked Retried.
func (r Rule) Faces(d *Detections) []Face {
	faces := r.Combine(d.SSD, d.Tiny)
	if len(faces) > 0 || d.Retry == nil {
		return faces
	}
	faces = r.Combine(d.Retry.SSD, d.Retry.Tiny)
	for i := range faces {
		faces[i].Retried = true
	}
	return faces
}

// DetectBoth runs both networks on img and keeps the detections scoring at
// least ssdFloor and tinyFloor; when the pipeline's Rule accepts none of
// them as a face and Options.SinglePass is not set, it runs both again on
// img with a border of RetryPad (Detections.Retry). The floors must be at
// most the rule's thresholds for the rule to be applied correctly (a
// benchmark may ask for lower ones to try other rules on the same
// detections). The pipeline must have both networks (Detector Both).
func (p *Pipeline) DetectBoth(img *imaging.RGB, ssdFloor, tinyFloor float64) (Detections, error) {
	var d Detections
	var err error
	if d.SSD, err = p.Detections(img, SSD, ssdFloor); err != nil {
		return d, err
	}
	if d.Tiny, err = p.Detections(img, Tiny, tinyFloor); err != nil {
		return d, err
	}
	if p.opt.SinglePass || len(p.opt.Rule.Combine(d.SSD, d.Tiny)) > 0 {
		return d, nil
	}
	padded, back := retryImage(img)
	var r Detections
	if r.SSD, err = p.Detections(padded, SSD, ssdFloor); err != nil {
		return d, fmt.Errorf("second pass: %w", err)
	}
	if r.Tiny, err = p.Detections(padded, Tiny, tinyFloor); err != nil {
		return d, fmt.Errorf("second pass: %w", err)
	}
	for _, ds := range [][]nets.Detection{r.SSD, r.Tiny} {
		for i := range ds {
			ds[i] = back(ds[i])
		}
	}
	d.Retry = &r
	return d, nil
}

// retryImage returns img shrunk by an integer factor to at most
// retryMaxSide/(1+2·RetryPad) pixels a side, with a border of RetryPad of
// retryFill on every side, and the function mapping a detection on it back
// to img's pixels.
func retryImage(img *imaging.RGB) (*imaging.RGB, func(nets.Detection) nets.Detection) {
	k := 1
	if inner := float64(retryMaxSide) / (1 + 2*RetryPad); float64(max(img.W, img.H)) > inner {
		k = int(math.Ceil(float64(max(img.W, img.H)) / inner))
	}
	w, h := max(img.W/k, 1), max(img.H/k, 1)
	px, py := int(math.Round(RetryPad*float64(w))), int(math.Round(RetryPad*float64(h)))
	out := imaging.NewRGB(w+2*px, h+2*py)
	for i := range out.Pix {
		out.Pix[i] = retryFill
	}
	for y := range h {
		for x := range w {
			var s [3]int
			n := 0
			for dy := range k {
				sy := y*k + dy
				if sy >= img.H {
					break
				}
				for dx := range k {
					sx := x*k + dx
					if sx >= img.W {
						break
					}
					r, g, b := img.At(sx, sy)
					s[0], s[1], s[2], n = s[0]+int(r), s[1]+int(g), s[2]+int(b), n+1
				}
			}
			out.Set(x+px, y+py, uint8((s[0]+n/2)/n), uint8((s[1]+n/2)/n), uint8((s[2]+n/2)/n))
		}
	}
	fk := float64(k)
	back := func(d nets.Detection) nets.Detection {
		d.X, d.Y = (d.X-float64(px))*fk, (d.Y-float64(py))*fk
		d.W, d.H = d.W*fk, d.H*fk
		return d
	}
	return out, back
}
