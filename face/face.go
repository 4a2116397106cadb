// Package face finds faces in photos and turns them into descriptors:
// Pipeline = Detector → Landmarker → Aligner → Embedder, on the pretrained
// networks of package face/nets.
//
// Coordinates are pixels of the decoded (EXIF-oriented) image. Descriptors
// are dlib's 128-d ResNet descriptors, not L2-normalised; two faces of the
// same person are usually within Euclidean distance 0.6.
package face

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// Box is an axis-aligned rectangle in image pixels.
type Box struct {
	X      float64 `json:"x"`
	Y      float64 `json:"y"`
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
}

// Center returns the centre of the box.
func (b Box) Center() (float64, float64) { return b.X + b.Width/2, b.Y + b.Height/2 }

// Area returns the box's area.
func (b Box) Area() float64 { return b.Width * b.Height }

// Landmarks are the 68 points of the iBUG 300-W markup, in image pixels.
type Landmarks [68][2]float64

// Face is one face found in a photo.
type Face struct {
	Box       Box       `json:"box"`
	Score     float64   `json:"score"`
	Landmarks Landmarks `json:"landmarks"`
	// Age in years and Gender ("male"/"female") with its probability, when
	// the age/gender network ran.
	Age        float64 `json:"age,omitempty"`
	Gender     string  `json:"gender,omitempty"`
	GenderProb float64 `json:"gender_probability,omitempty"`
	// Descriptor is the 128-d face descriptor, when requested.
	Descriptor []float32 `json:"descriptor,omitempty"`
	// Fallback is set when no face was detected and the face was assumed
	// to fill a fixed central box (see Pipeline.Central).
	Fallback bool `json:"fallback,omitempty"`
	// LowScore is set when Pipeline.Central accepted a detection scoring
	// below the pipeline's MinScore because nothing scored above it.
	LowScore bool `json:"low_score,omitempty"`
	// SecondDetector is set when Pipeline.Central took this face from the
	// other detector, whose landmarks fitted the mean face better.
	SecondDetector bool `json:"second_detector,omitempty"`
	// Detector is the network whose box and score the face has. With
	// Detector Both, SSDScore and TinyScore are the two networks' scores
	// for the face (0: that network did not find it).
	Detector  Detector `json:"detector,omitempty"`
	SSDScore  float64  `json:"ssd_score,omitempty"`
	TinyScore float64  `json:"tiny_score,omitempty"`
	// Retried is set when Detector Both found the face on its second pass
	// (the photo with a border, RetryPad), run because the first found none.
	Retried bool `json:"retried,omitempty"`
}

// Detector selects the face detector.
type Detector string

// Detectors.
const (
	// SSD is face-api's SSD-MobileNet-v1.
	SSD Detector = "ssd"
	// Tiny is face-api's tiny face detector.
	Tiny Detector = "tiny"
	// Both runs both networks and keeps the faces Options.Rule accepts:
	// the default, because each network misses faces the other finds
	// (SSD fails on most greyscale photos; see DefaultRule).
	Both Detector = "both"
)

// Align selects how a face is cropped for the descriptor.
type Align string

// Aligners.
const (
	// AlignDlib is dlib's similarity alignment of 33 landmarks onto its
	// mean face: how dlib cut the chips the descriptor was trained on.
	AlignDlib Align = "dlib"
	// AlignFaceAPI is face-api's axis-aligned crop around eyes and mouth,
	// which reproduces face-api's reference descriptors. It is Options'
	// default; alone it measured 98.3% (SSD) and 98.6% (tiny detector) on
	// LFW's development pairs against dlib alignment's 98.1% and 98.5%. The
	// commands default to AlignBoth.
	AlignFaceAPI Align = "faceapi"
	// AlignBoth describes both crops and averages the two descriptors (two
	// descriptor passes per face). The crops err differently (face-api's
	// keeps the landmarks' scale but not their rotation), so the average
	// is more stable: 10-fold accuracy on LFW's 2,200 development training
	// pairs 98.41% against 98.32% (faceapi) and 98.27% (dlib), and 98.95%
	// against 98.82% with Central's second detector.
	AlignBoth Align = "both"
)

// Options configure a Pipeline. The zero value of each field selects its
// default.
type Options struct {
	// ModelDir holds face-api's weight files (default nets.DefaultModelDir()).
	ModelDir string
	// Detector is Both (default), SSD or Tiny.
	Detector Detector
	// Rule decides which detections are faces for Detector Both (zero
	// value: DefaultRule). MinScore does not apply to Both.
	Rule Rule
	// Align is AlignFaceAPI (default) or AlignDlib.
	Align Align
	// MinScore is the detection threshold of SSD and Tiny (default 0.5),
	// in (0, 1). With Both it applies to Central only (see Central).
	MinScore float64
	// MaxFaces bounds the faces per photo (default 100).
	MaxFaces int
	// AgeGender runs the age/gender network.
	AgeGender bool
	// Descriptors runs the descriptor network.
	Descriptors bool
	// TinyLandmarks uses the small 68-point network (the default pairs it
	// with the tiny detector, as face-api does).
	TinyLandmarks bool
	// SecondDetector loads the other detector too, and Central consults
	// it when the first finds no face or only one scoring below MinScore.
	SecondDetector bool
	// SinglePass turns off Detector Both's second pass (see DetectBoth),
	// which otherwise runs both networks again, on the photo with a
	// border, when the first pass found no face.
	SinglePass bool
	// Engine runs the SSD detector's GoMLX layers, and its Parallelism
	// bounds the goroutines every network's Go kernels use; nil means a
	// new default engine of the pipeline's own (see engine.OrDefault) and
	// one worker per GOMAXPROCS.
	Engine *engine.Engine
}

// ErrOptions is wrapped by option validation errors.
var ErrOptions = errors.New("invalid face pipeline options")

func (o *Options) fill() error {
	if o.ModelDir == "" {
		o.ModelDir = nets.DefaultModelDir()
	}
	switch o.Detector {
	case "":
		o.Detector = Both
	case SSD, Tiny, Both:
	default:
		return fmt.Errorf("%w: detector %q (want both, ssd or tiny)", ErrOptions, o.Detector)
	}
	if o.Rule == (Rule{}) {
		o.Rule = DefaultRule()
	}
	if err := o.Rule.Validate(); err != nil {
		return err
	}
	switch o.Align {
	case "":
		o.Align = AlignFaceAPI
	case AlignDlib, AlignFaceAPI, AlignBoth:
	default:
		return fmt.Errorf("%w: aligner %q (want dlib, faceapi or both)", ErrOptions, o.Align)
	}
	if o.MinScore == 0 {
		o.MinScore = 0.5
	}
	if !(o.MinScore > 0 && o.MinScore < 1) {
		return fmt.Errorf("%w: minimum score %v not in (0, 1)", ErrOptions, o.MinScore)
	}
	if o.MaxFaces == 0 {
		o.MaxFaces = 100
	}
	if o.MaxFaces < 1 || o.MaxFaces > 10000 {
		return fmt.Errorf("%w: max faces %d not in 1..10000", ErrOptions, o.MaxFaces)
	}
	return nil
}

// Timings are the seconds a Run spent in each stage.
type Timings struct {
	Detect, Landmarks, Align, Descriptor, AgeGender time.Duration
}

// Add accumulates other into t.
func (t *Timings) Add(o Timings) {
	t.Detect += o.Detect
	t.Landmarks += o.Landmarks
	t.Align += o.Align
	t.Descriptor += o.Descriptor
	t.AgeGender += o.AgeGender
}

// Pipeline runs detection, landmarks, alignment and the descriptor. It is
// safe for concurrent use; run several photos at once to use every core.
type Pipeline struct {
	opt       Options
	ssd       *nets.SSD
	tiny      *nets.Tiny
	landmarks *nets.Landmarker
	ageGender *nets.AgeGender
	desc      *nets.Descriptor
}

// NewPipeline validates the options and loads the networks they need.
func NewPipeline(opt Options) (*Pipeline, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	p := &Pipeline{opt: opt}
	var err error
	if opt.Detector != Tiny || opt.SecondDetector {
		if p.ssd, err = nets.NewSSD(opt.ModelDir, opt.Engine); err != nil {
			return nil, err
		}
	}
	if opt.Detector != SSD || opt.SecondDetector {
		if p.tiny, err = nets.NewTiny(opt.ModelDir, opt.Engine); err != nil {
			return nil, err
		}
	}
	if p.landmarks, err = nets.NewLandmarker(opt.ModelDir, opt.TinyLandmarks, opt.Engine); err != nil {
		return nil, err
	}
	if opt.AgeGender {
		if p.ageGender, err = nets.NewAgeGenderOn(opt.ModelDir, opt.Engine); err != nil {
			return nil, err
		}
	}
	if opt.Descriptors {
		if p.desc, err = nets.NewDescriptor(opt.ModelDir, opt.Engine); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Options returns the pipeline's options with defaults filled in.
func (p *Pipeline) Options() Options { return p.opt }

// Detect finds face boxes only. With Detector Both it applies Options.Rule
// to DetectBoth's detections: a photo in which the first pass finds no face
// costs a second pass of both networks (see RetryPad), unless
// Options.SinglePass.
func (p *Pipeline) Detect(img *imaging.RGB) ([]Face, error) {
	if p.opt.Detector == Both {
		fs, ft := p.opt.Rule.floors()
		d, err := p.DetectBoth(img, fs, ft)
		if err != nil {
			return nil, err
		}
		faces := p.opt.Rule.Faces(&d)
		if len(faces) > p.opt.MaxFaces {
			faces = faces[:p.opt.MaxFaces]
		}
		return faces, nil
	}
	return p.detect(img, p.opt.Detector, p.opt.MinScore)
}

// Detections runs one network, SSD or Tiny, as the pipeline runs it (SSD:
// NMS IoU 0.5, at most MaxFaces boxes; tiny detector: 416-pixel input, NMS
// IoU 0.4) and returns its detections scoring above minScore, best first.
// The network must be loaded: Detector Both or SecondDetector loads both.
func (p *Pipeline) Detections(img *imaging.RGB, d Detector, minScore float64) ([]nets.Detection, error) {
	var dets []nets.Detection
	var err error
	switch {
	case d == SSD && p.ssd != nil:
		dets, err = p.ssd.Detect(img, nets.SSDOptions{MinScore: minScore, MaxResults: p.opt.MaxFaces, IoU: 0.5})
	case d == Tiny && p.tiny != nil:
		dets, err = p.tiny.Detect(img, nets.TinyOptions{InputSize: 416, ScoreThreshold: minScore, IoU: 0.4})
	default:
		return nil, fmt.Errorf("%w: detector %q is not loaded in this pipeline", ErrOptions, d)
	}
	if err != nil {
		return nil, fmt.Errorf("face: detecting: %w", err)
	}
	return dets, nil
}

// detect runs one network and returns its faces above minScore.
func (p *Pipeline) detect(img *imaging.RGB, d Detector, minScore float64) ([]Face, error) {
	dets, err := p.Detections(img, d, minScore)
	if err != nil {
		return nil, err
	}
	if len(dets) > p.opt.MaxFaces {
		dets = dets[:p.opt.MaxFaces]
	}
	faces := make([]Face, len(dets))
	for i, det := range dets {
		faces[i] = Face{Box: detBox(det), Score: det.Score, Detector: d}
	}
	return faces, nil
}

// Run detects the faces in img and completes each (landmarks, alignment,
// descriptor, age/gender as configured).
func (p *Pipeline) Run(img *imaging.RGB) ([]Face, Timings, error) {
	var tm Timings
	t0 := time.Now()
	faces, err := p.Detect(img)
	tm.Detect = time.Since(t0)
	if err != nil {
		return nil, tm, err
	}
	t2, err := p.Complete(img, faces)
	tm.Add(t2)
	return faces, tm, err
}

// FallbackBox is the face box assumed when nothing is detected in a photo
// centred on one face: the median SSD box of LFW's deep-funneled images,
// 0.39 × 0.47 of the shorter side, centred (measured on 110 images of the
// set: x 77.7, y 69.1, 98.3 × 118.6 px in 250 × 250).
func FallbackBox(w, h int) Box {
	s := math.Min(float64(w), float64(h))
	bw, bh := 0.393*s, 0.474*s
	return Box{X: 0.507*float64(w) - bw/2, Y: 0.514*float64(h) - bh/2, Width: bw, Height: bh}
}

// CentralMinScore is the lowest detection score Central accepts when no
// face reaches the pipeline's MinScore. On LFW's deep-funneled images SSD
// scores about 8% of the (always present) faces below 0.5 and almost none
// below 0.1, and a false detection near the centre of such a photo is rare.
const CentralMinScore = 0.1

// Complete fills landmarks, descriptors and age/gender of faces whose boxes
// are set.
func (p *Pipeline) Complete(img *imaging.RGB, faces []Face) (Timings, error) {
	var tm Timings
	if len(faces) == 0 {
		return tm, nil
	}
	t0 := time.Now()
	if err := p.fillLandmarks(img, faces); err != nil {
		return tm, err
	}
	tm.Landmarks = time.Since(t0)
	t2, err := p.describe(img, faces)
	tm.Add(t2)
	return tm, err
}

// describe fills descriptors and age/gender of faces whose landmarks are
// set.
func (p *Pipeline) describe(img *imaging.RGB, faces []Face) (Timings, error) {
	var tm Timings
	if p.desc != nil {
		t1 := time.Now()
		var inputs []*imaging.Float
		for i := range faces {
			in, err := p.alignedInputs(img, &faces[i])
			if err != nil {
				return tm, err
			}
			inputs = append(inputs, in...)
		}
		tm.Align = time.Since(t1)
		t2 := time.Now()
		descs, err := p.desc.Compute(inputs)
		if err != nil {
			return tm, fmt.Errorf("face: descriptor: %w", err)
		}
		per := len(descs) / len(faces)
		for i := range faces {
			faces[i].Descriptor = meanVector(descs[i*per : (i+1)*per])
		}
		tm.Descriptor = time.Since(t2)
	}
	if p.ageGender != nil {
		t3 := time.Now()
		if err := p.fillAgeGender(img, faces); err != nil {
			return tm, err
		}
		tm.AgeGender = time.Since(t3)
	}
	return tm, nil
}

// alignedInputs returns the 150×150 descriptor inputs of a face: one per
// aligner (two for AlignBoth, whose descriptors are averaged).
func (p *Pipeline) alignedInputs(img *imaging.RGB, f *Face) ([]*imaging.Float, error) {
	var in []*imaging.Float
	if p.opt.Align == AlignFaceAPI || p.opt.Align == AlignBoth {
		crop, err := img.Crop(FaceAPIAlignBox(&f.Landmarks, img.W, img.H))
		if err != nil {
			return nil, fmt.Errorf("face: face-api alignment crop: %w", err)
		}
		in = append(in, nets.DescriptorInput(crop))
	}
	if p.opt.Align == AlignDlib || p.opt.Align == AlignBoth {
		chip, err := DlibChip(img, &f.Landmarks, 150)
		if err != nil {
			return nil, err
		}
		in = append(in, nets.DescriptorInput(chip))
	}
	return in, nil
}

// meanVector is the element-wise mean of vs (vs[0] itself for one).
func meanVector(vs [][]float32) []float32 {
	if len(vs) == 1 {
		return vs[0]
	}
	out := make([]float32, len(vs[0]))
	for _, v := range vs {
		for i, x := range v {
			out[i] += x
		}
	}
	for i := range out {
		out[i] /= float32(len(vs))
	}
	return out
}

// Central returns the completed face of the photo's subject, by LFW's
// convention the face at the centre: among detections scoring at least
// CentralMinScore, the best-scoring one whose box contains the image
// centre; if no box contains it, the face nearest the centre among those
// scoring at least MinScore, else among all. A face below MinScore is
// marked LowScore. With no detection at all, FallbackBox is completed and
// marked Fallback.
//
// Preferring the box over the centre matters: SSD may score a face cut by
// the photo's edge above the subject's own (seen on LFW's David_Stern_0001,
// 0.58 against 0.46).
//
// With Options.SecondDetector, a LowScore or Fallback face is checked
// against the other detector's central face, and the one whose landmarks
// fit dlib's mean face better (LandmarkFit) is kept. A doubtful box often
// gives the landmark network a crop it cannot read: on LFW's development
// images the tiny detector's low-scoring boxes include whole-head and
// half-face boxes whose landmarks collapse, and SSD's box for the same
// face fits (LFW Gary_Winnick_0002, Gwendal_Peizerat_0002).
//
// With Detector Both, Central is the tiny detector's central face checked
// this way against SSD's: the combination `veil verify` measured best on
// LFW's development pairs (99.0% with AlignBoth). Rule plays no part here:
// Central always takes a central face, down to CentralMinScore and the
// fallback box, so accepting more faces could not add one.
func (p *Pipeline) Central(img *imaging.RGB) (*Face, error) {
	first, second := p.opt.Detector, Detector("")
	switch {
	case first == Both:
		first, second = Tiny, SSD
	case p.opt.SecondDetector && first == SSD:
		second = Tiny
	case p.opt.SecondDetector:
		second = SSD
	}
	f, err := p.central(img, first)
	if err != nil {
		return nil, err
	}
	if second != "" && (f.LowScore || f.Fallback) {
		g, err := p.central(img, second)
		if err != nil {
			return nil, err
		}
		if LandmarkFit(&g.Landmarks) < LandmarkFit(&f.Landmarks) {
			f = g
			f.SecondDetector = true
		}
	}
	one := []Face{f}
	if _, err := p.describe(img, one); err != nil {
		return nil, err
	}
	return &one[0], nil
}

// central picks the central face of detector d and fills its landmarks.
func (p *Pipeline) central(img *imaging.RGB, d Detector) (Face, error) {
	low := math.Min(CentralMinScore, p.opt.MinScore)
	all, err := p.detect(img, d, low)
	if err != nil {
		return Face{}, err
	}
	cx, cy := float64(img.W)/2, float64(img.H)/2
	var f Face
	found := false
	for _, c := range all {
		b := c.Box
		if cx >= b.X && cx <= b.X+b.Width && cy >= b.Y && cy <= b.Y+b.Height && (!found || c.Score > f.Score) {
			f, found = c, true
		}
	}
	if !found {
		best := math.Inf(1)
		for pass := 0; pass < 2 && !found; pass++ {
			for _, c := range all {
				if pass == 0 && c.Score < p.opt.MinScore {
					continue
				}
				x, y := c.Box.Center()
				if d := math.Hypot(x-cx, y-cy); d < best {
					best, f, found = d, c, true
				}
			}
		}
	}
	lowScore := found && f.Score < p.opt.MinScore
	if !found {
		f = Face{Box: FallbackBox(img.W, img.H), Fallback: true}
	}
	f.LowScore = lowScore
	one := []Face{f}
	if err := p.fillLandmarks(img, one); err != nil {
		return Face{}, err
	}
	return one[0], nil
}
