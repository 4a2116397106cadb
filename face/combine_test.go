package face

import (
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face/nets"
)

func det(x, y, w, h, score float64) nets.Detection {
	return nets.Detection{X: x, Y: y, W: w, H: h, Score: score}
}

func TestRuleCombine(t *testing.T) {
	r := Rule{SSD: 0.5, Tiny: 0.6, PairSSD: 0.05, PairTiny: 0.2, PairIoU: 0.4}
	// A face at (100,100) 100×120: SSD's box and the tiny detector's wider,
	// shorter box of it overlap by IoU 0.67.
	ssdBox := func(s float64) nets.Detection { return det(100, 100, 100, 120, s) }
	tinyBox := func(s float64) nets.Detection { return det(90, 115, 120, 100, s) }
	type want struct {
		det       Detector
		score     float64
		ssd, tiny float64
		x         float64
	}
	tests := []struct {
		name      string
		ssd, tiny []nets.Detection
		want      []want
	}{
		{"nothing", nil, nil, nil},
		{"SSD alone, confident", []nets.Detection{ssdBox(0.7)}, nil, []want{{SSD, 0.7, 0.7, 0, 100}}},
		{"SSD alone, doubtful", []nets.Detection{ssdBox(0.4)}, nil, nil},
		{"tiny alone, confident", nil, []nets.Detection{tinyBox(0.65)}, []want{{Tiny, 0.65, 0, 0.65, 90}}},
		{"tiny alone, below its own threshold", nil, []nets.Detection{tinyBox(0.55)}, nil},
		// Greyscale photos: SSD barely sees the face, the tiny detector
		// does; both agree on the place, so it is a face.
		{"both doubtful, agreeing", []nets.Detection{ssdBox(0.06)}, []nets.Detection{tinyBox(0.3)},
			[]want{{Tiny, 0.3, 0.06, 0.3, 90}}},
		{"both doubtful, SSD higher: SSD's box", []nets.Detection{ssdBox(0.45)}, []nets.Detection{tinyBox(0.3)},
			[]want{{SSD, 0.45, 0.45, 0.3, 100}}},
		{"pair below the pair thresholds", []nets.Detection{ssdBox(0.04)}, []nets.Detection{tinyBox(0.5)}, nil},
		{"doubtful boxes in different places", []nets.Detection{ssdBox(0.3)}, []nets.Detection{det(300, 100, 120, 100, 0.5)}, nil},
		{"confident SSD with a weak tiny partner", []nets.Detection{ssdBox(0.9)}, []nets.Detection{tinyBox(0.03)},
			[]want{{SSD, 0.9, 0.9, 0.03, 100}}},
		{"two faces, best first",
			[]nets.Detection{det(400, 50, 80, 90, 0.55), ssdBox(0.95)}, []nets.Detection{tinyBox(0.8)},
			[]want{{SSD, 0.95, 0.95, 0.8, 100}, {SSD, 0.55, 0.55, 0, 400}}},
		// A second SSD box of the same face (IoU 0.46 with the first: SSD's
		// own NMS lets it through) overlaps the tiny box already paired
		// with the first by 0.48: the same face, reported once.
		{"second SSD box on a paired face",
			[]nets.Detection{ssdBox(0.9), det(80, 140, 110, 100, 0.6)}, []nets.Detection{tinyBox(0.8)},
			[]want{{SSD, 0.9, 0.9, 0.8, 100}}},
		// Two SSD faces overlapping each other, without tiny boxes, are
		// left as SSD's NMS left them.
		{"overlapping SSD faces stay", []nets.Detection{det(0, 0, 100, 100, 0.9), det(30, 0, 100, 100, 0.8)}, nil,
			[]want{{SSD, 0.9, 0.9, 0, 0}, {SSD, 0.8, 0.8, 0, 30}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := r.Combine(tc.ssd, tc.tiny)
			if len(got) != len(tc.want) {
				t.Fatalf("%d faces %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Detector != w.det || g.Score != w.score || g.SSDScore != w.ssd || g.TinyScore != w.tiny || g.Box.X != w.x {
					t.Errorf("face %d = %+v, want detector %s score %g (ssd %g, tiny %g) at x %g", i, g, w.det, w.score, w.ssd, w.tiny, w.x)
				}
			}
		})
	}
}

// TestRuleCombinePairsBestOverlap: a tiny box between two SSD boxes pairs
// with the one it overlaps most, leaving the other to stand alone.
func TestRuleCombinePairsBestOverlap(t *testing.T) {
	r := Rule{SSD: 0.5, Tiny: 0.5, PairSSD: 0.1, PairTiny: 0.1, PairIoU: 0.3}
	ssd := []nets.Detection{det(0, 0, 100, 100, 0.2), det(40, 0, 100, 100, 0.2)}
	tiny := []nets.Detection{det(35, 0, 100, 100, 0.3)}
	got := r.Combine(ssd, tiny)
	if len(got) != 1 || got[0].SSDScore != 0.2 || got[0].Box.X != 35 {
		t.Fatalf("got %+v, want one face pairing the tiny box with the SSD box at x 40", got)
	}
	if iou := detBox(ssd[1]).IoU(detBox(tiny[0])); !(iou > detBox(ssd[0]).IoU(detBox(tiny[0]))) {
		t.Fatalf("test geometry: IoU %g", iou)
	}
}

func TestBoxIoU(t *testing.T) {
	a := Box{X: 0, Y: 0, Width: 10, Height: 10}
	tests := []struct {
		b    Box
		want float64
	}{
		{a, 1},
		{Box{X: 5, Y: 0, Width: 10, Height: 10}, 50.0 / 150},
		{Box{X: 10, Y: 0, Width: 10, Height: 10}, 0},
		{Box{X: 2, Y: 2, Width: 5, Height: 5}, 0.25},
		{Box{X: 2, Y: 2, Width: 0, Height: 5}, 0},
	}
	for _, tc := range tests {
		if got := a.IoU(tc.b); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("IoU(%+v) = %g, want %g", tc.b, got, tc.want)
		}
	}
	if !a.Contains(10, 0) || a.Contains(10.01, 5) {
		t.Error("Contains: edges are inside, beyond is not")
	}
}

func TestRuleValidate(t *testing.T) {
	if err := DefaultRule().Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		r    Rule
		want string
	}{
		{Rule{SSD: 0, Tiny: 0.5, PairSSD: 0.1, PairTiny: 0.1, PairIoU: 0.4}, "SSD threshold"},
		{Rule{SSD: 0.5, Tiny: 1, PairSSD: 0.1, PairTiny: 0.1, PairIoU: 0.4}, "tiny threshold"},
		{Rule{SSD: 0.5, Tiny: 0.5, PairSSD: math.NaN(), PairTiny: 0.1, PairIoU: 0.4}, "pair SSD"},
		{Rule{SSD: 0.5, Tiny: 0.5, PairSSD: 0.1, PairTiny: -0.1, PairIoU: 0.4}, "pair tiny"},
		{Rule{SSD: 0.5, Tiny: 0.5, PairSSD: 0.1, PairTiny: 0.1, PairIoU: 0}, "pair IoU"},
		{Rule{SSD: 0.5, Tiny: 0.5, PairSSD: 0.1, PairTiny: 0.1, PairIoU: 1.5}, "pair IoU"},
	}
	for _, tc := range tests {
		err := tc.r.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want mention of %q", tc.r, err, tc.want)
		}
		if _, err := NewPipeline(Options{Rule: tc.r}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPipeline with rule %+v: err %v, want mention of %q", tc.r, err, tc.want)
		}
	}
}
