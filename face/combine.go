package face

import (
	"fmt"
	"math"
	"sort"

	"github.com/veil-privacy/veil/face/nets"
)

// Rule decides which detections are faces when both detectors run
// (Detector Both). A face is
//
//   - a detection of one network alone scoring at least SSD (SSD) or Tiny
//     (tiny detector), or
//   - a face both networks found — an SSD box and a tiny box overlapping by
//     IoU ≥ PairIoU — with the SSD box scoring at least PairSSD and the
//     tiny box at least PairTiny.
//
// Two networks trained apart seldom agree on the same wrong place, so a
// face both see may pass at scores that alone would be doubtful; this is
// the check `veil verify` has made with its second detector for central
// faces, applied to every face of a photo.
type Rule struct {
	SSD      float64 `json:"ssd"`
	Tiny     float64 `json:"tiny"`
	PairSSD  float64 `json:"pair_ssd"`
	PairTiny float64 `json:"pair_tiny"`
	PairIoU  float64 `json:"pair_iou"`
}

// DefaultRule is the rule Detector Both uses unless Options.Rule says
// otherwise. Each network alone keeps face-api's 0.5; the pair thresholds
// were chosen by `veil bench detect --tune --train-every 18` on every 18th
// image of LFW's development training pairs (192 images, colour and
// greyscale copies; objective: labelled faces found minus other faces
// accepted) over a grid of 256 rules, and measured on every 9th image of
// the development test pairs (173 images):
//
//	                 colour            grey
//	                 recall  other     recall  other
//	SSD alone        89.6%   11        42.8%   3
//	tiny alone       84.4%    6        88.4%   5
//	either at 0.5    96.0%   13        90.2%   6
//	DefaultRule      96.5%   13        94.2%   8
//
// "Found" is a box containing the image centre that overlaps LFW's central
// face box by IoU ≥ 0.3; "other" counts every other accepted face, real
// people in the background included. PairSSD sits at the grid's (and the
// measurement's) floor of 0.01: any SSD box a confident enough tiny box
// (≥ 0.4) agrees with is a face. A hand-set rule (pair SSD 0.05, tiny 0.2)
// measured the same within noise on the test images (97.7% and 94.2%,
// 17 and 7 other faces).
//
// Detector Both also runs a second pass where this rule finds no face in
// a photo (Pipeline.DetectBoth, RetryPad). On all 1,549 development test
// photos the rule found the labelled face in 97.1% of them in colour and
// 90.8% of their grey copies on the first pass, and in 99.7% and 99.2%
// with the second, accepting 116 and 64 other faces against 113 and 57;
// in the left and right quarters of every 6th of those photos (1,036 crops
// with the grey copies) it found 46 faces where the first pass found 16.
// Every face the second pass added, looked at one by one, was a person
// beside the subject (`veil bench detect --pairs …/pairsDevTest.txt
// --sides-every 6`).
func DefaultRule() Rule {
	return Rule{SSD: 0.5, Tiny: 0.5, PairSSD: 0.01, PairTiny: 0.4, PairIoU: 0.3}
}

// Validate reports whether every threshold is in (0, 1) and PairIoU in (0, 1].
func (r Rule) Validate() error {
	for _, v := range []struct {
		name string
		x    float64
	}{{"SSD", r.SSD}, {"tiny", r.Tiny}, {"pair SSD", r.PairSSD}, {"pair tiny", r.PairTiny}} {
		if !(v.x > 0 && v.x < 1) {
			return fmt.Errorf("%w: rule's %s threshold %v not in (0, 1)", ErrOptions, v.name, v.x)
		}
	}
	if !(r.PairIoU > 0 && r.PairIoU <= 1) {
		return fmt.Errorf("%w: rule's pair IoU %v not in (0, 1]", ErrOptions, r.PairIoU)
	}
	return nil
}

// floors are the lowest scores of each network the rule can accept: its
// detectors must report everything at or above them.
func (r Rule) floors() (ssd, tiny float64) {
	return math.Min(r.SSD, r.PairSSD), math.Min(r.Tiny, r.PairTiny)
}

// Combine applies the rule to the detections of the two networks on one
// photo (each list as its detector returned it, down to at least the rule's
// thresholds) and returns the faces, best score first.
//
// SSD and tiny boxes are paired greedily by decreasing IoU (each box at
// most once, IoU ≥ PairIoU). A face found by both takes the box and score
// of the network that scored it higher and records both scores. A box
// left unpaired that overlaps the other network's box of an accepted face
// by IoU ≥ PairIoU is that same face and is dropped; boxes of one network
// overlapping each other were already resolved by its own non-maximum
// suppression and are left alone.
func (r Rule) Combine(ssd, tiny []nets.Detection) []Face {
	type pair struct {
		i, j int
		iou  float64
	}
	var pairs []pair
	for i, s := range ssd {
		for j, t := range tiny {
			if v := detBox(s).IoU(detBox(t)); v >= r.PairIoU {
				pairs = append(pairs, pair{i, j, v})
			}
		}
	}
	sort.SliceStable(pairs, func(a, b int) bool { return pairs[a].iou > pairs[b].iou })
	matchS, matchT := make([]int, len(ssd)), make([]int, len(tiny))
	for i := range matchS {
		matchS[i] = -1
	}
	for j := range matchT {
		matchT[j] = -1
	}
	for _, p := range pairs {
		if matchS[p.i] < 0 && matchT[p.j] < 0 {
			matchS[p.i], matchT[p.j] = p.j, p.i
		}
	}
	// A candidate face with the indices of its SSD and tiny boxes (-1: none).
	type cand struct {
		f    Face
		i, j int
	}
	var cs []cand
	for i, s := range ssd {
		j := matchS[i]
		switch {
		case j < 0 && s.Score >= r.SSD:
			cs = append(cs, cand{Face{Box: detBox(s), Score: s.Score, Detector: SSD, SSDScore: s.Score}, i, -1})
		case j >= 0:
			t := tiny[j]
			if s.Score >= r.SSD || t.Score >= r.Tiny || (s.Score >= r.PairSSD && t.Score >= r.PairTiny) {
				f := Face{Box: detBox(s), Score: s.Score, Detector: SSD, SSDScore: s.Score, TinyScore: t.Score}
				if t.Score > s.Score {
					f.Box, f.Score, f.Detector = detBox(t), t.Score, Tiny
				}
				cs = append(cs, cand{f, i, j})
			}
		}
	}
	for j, t := range tiny {
		if matchT[j] < 0 && t.Score >= r.Tiny {
			cs = append(cs, cand{Face{Box: detBox(t), Score: t.Score, Detector: Tiny, TinyScore: t.Score}, -1, j})
		}
	}
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].f.Score > cs[b].f.Score })
	var kept []cand
	for _, c := range cs {
		dup := false
		for _, k := range kept {
			if c.i >= 0 && k.j >= 0 && detBox(ssd[c.i]).IoU(detBox(tiny[k.j])) >= r.PairIoU ||
				c.j >= 0 && k.i >= 0 && detBox(tiny[c.j]).IoU(detBox(ssd[k.i])) >= r.PairIoU {
				dup = true
				break
			}
		}
		if !dup {
			kept = append(kept, c)
		}
	}
	out := make([]Face, len(kept))
	for k, c := range kept {
		out[k] = c.f
	}
	return out
}

func detBox(d nets.Detection) Box { return Box{X: d.X, Y: d.Y, Width: d.W, Height: d.H} }

// IoU returns the intersection over union of b and o (0 when either is
// empty). It is the project's one IoU of face boxes.
func (b Box) IoU(o Box) float64 {
	in := b.Intersection(o)
	if in == 0 {
		return 0
	}
	return in / (b.Area() + o.Area() - in)
}

// Intersection returns the area b and o share (0 when either is empty).
func (b Box) Intersection(o Box) float64 {
	iw := math.Min(b.X+b.Width, o.X+o.Width) - math.Max(b.X, o.X)
	ih := math.Min(b.Y+b.Height, o.Y+o.Height) - math.Max(b.Y, o.Y)
	if iw <= 0 || ih <= 0 || b.Width <= 0 || b.Height <= 0 || o.Width <= 0 || o.Height <= 0 {
		return 0
	}
	return iw * ih
}

// Contains reports whether the point (x, y) lies in the box (edges
// included).
func (b Box) Contains(x, y float64) bool {
	return x >= b.X && x <= b.X+b.Width && y >= b.Y && y <= b.Y+b.Height
}
