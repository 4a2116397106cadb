package face

import (
	"fmt"
	"math"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// meanFaceLandmarks places dlib's mean face (points 17–67; 0–16 left at
// the origin, LandmarkFit ignores them) through the similarity x' = s·R(θ)x + t.
func meanFaceLandmarks(s, th, tx, ty float64) Landmarks {
	var l Landmarks
	for k := 17; k < 68; k++ {
		m := dlibMeanFace[k-17]
		l[k] = [2]float64{
			s*(math.Cos(th)*m[0]-math.Sin(th)*m[1]) + tx,
			s*(math.Sin(th)*m[0]+math.Cos(th)*m[1]) + ty,
		}
	}
	return l
}

func TestLandmarkFit(t *testing.T) {
	jittered := meanFaceLandmarks(120, 0.2, 40, 70)
	for i, k := range dlibTemplatePoints() {
		// ±0.03 mean-face units, alternating, on both axes.
		d := 0.03 * 120 * float64(1-2*(i%2))
		jittered[k][0] += d
		jittered[k][1] -= d
	}
	var collapsed Landmarks
	for k := range collapsed {
		collapsed[k] = [2]float64{50, 60}
	}
	mirrored := meanFaceLandmarks(100, 0, 0, 0)
	for k := range mirrored {
		mirrored[k][1] = 100 - mirrored[k][1] // upside down: no similarity maps it back
	}
	tests := []struct {
		name     string
		l        Landmarks
		min, max float64
	}{
		{"mean face, rotated, scaled, moved", meanFaceLandmarks(87, -0.4, 300, 12), 0, 1e-9},
		{"±0.03 on each axis", jittered, 0.035, 0.05},
		{"upside down", mirrored, 0.2, math.Inf(1)},
		{"collapsed to a point", collapsed, math.Inf(1), math.Inf(1)},
	}
	for _, tc := range tests {
		got := LandmarkFit(&tc.l)
		if !(got >= tc.min && got <= tc.max) {
			t.Errorf("%s: LandmarkFit = %g, want in [%g, %g]", tc.name, got, tc.min, tc.max)
		}
	}
}

// lfwImage decodes LFW's deep-funnelled image n of person.
func lfwImage(t *testing.T, person string, n int) *imaging.RGB {
	t.Helper()
	path := datadir.ForTest(t, "lfw", "images_deepfunneled", person, fmt.Sprintf("%s_%04d.jpg", person, n))
	img, _, err := imaging.DecodeFile(path, imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestSecondDetector: on LFW's Gary_Winnick_0002 the tiny detector's only
// central box scores below 0.5 and takes in the whole head, and its
// landmarks collapse; SSD's box gives landmarks that fit the mean face.
func TestSecondDetector(t *testing.T) {
	img := lfwImage(t, "Gary_Winnick", 2)
	md := datadir.ModelDirForTest(t)
	alone, err := NewPipeline(Options{ModelDir: md, Detector: Tiny})
	if err != nil {
		t.Fatal(err)
	}
	both, err := NewPipeline(Options{ModelDir: md, Detector: Tiny, SecondDetector: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := alone.Central(img)
	if err != nil {
		t.Fatal(err)
	}
	g, err := both.Central(img)
	if err != nil {
		t.Fatal(err)
	}
	if !f.LowScore || f.SecondDetector {
		t.Fatalf("tiny alone: LowScore %v SecondDetector %v, want a low-scoring tiny face", f.LowScore, f.SecondDetector)
	}
	if !g.SecondDetector {
		t.Fatalf("with the second detector: face not taken from SSD (fit %.3f)", LandmarkFit(&g.Landmarks))
	}
	if a, b := LandmarkFit(&f.Landmarks), LandmarkFit(&g.Landmarks); !(b < 0.09 && a > 2*b) {
		t.Errorf("landmark fit: tiny %.3f, SSD %.3f; want SSD's within LFW's 99th percentile (0.09) and far better", a, b)
	}
	// A face the first detector finds confidently is kept as it is.
	h, err := both.Central(lfwImage(t, "Gary_Winnick", 1))
	if err != nil {
		t.Fatal(err)
	}
	if h.SecondDetector || h.LowScore {
		t.Errorf("Gary_Winnick_0001: SecondDetector %v LowScore %v, want the tiny detector's confident face", h.SecondDetector, h.LowScore)
	}
}

// TestAlignBoth: the both-aligners descriptor is the mean of the two
// single-aligner descriptors of the same face.
func TestAlignBoth(t *testing.T) {
	img := lfwImage(t, "Gary_Winnick", 1)
	md := datadir.ModelDirForTest(t)
	desc := map[Align][]float32{}
	for _, a := range []Align{AlignFaceAPI, AlignDlib, AlignBoth} {
		p, err := NewPipeline(Options{ModelDir: md, Detector: Tiny, Align: a, Descriptors: true})
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.Central(img)
		if err != nil {
			t.Fatal(err)
		}
		desc[a] = f.Descriptor
	}
	var gap, diff float64
	for i := range desc[AlignBoth] {
		want := (float64(desc[AlignFaceAPI][i]) + float64(desc[AlignDlib][i])) / 2
		diff = math.Max(diff, math.Abs(float64(desc[AlignBoth][i])-want))
		gap = math.Max(gap, math.Abs(float64(desc[AlignFaceAPI][i]-desc[AlignDlib][i])))
	}
	if diff > 1e-5 || gap < 1e-3 {
		t.Errorf("both = mean of faceapi and dlib within %g (want ≤ 1e-5); the two differ by up to %g (want distinct)", diff, gap)
	}
}

// TestCentralWithBoth: with Detector Both, Central is the tiny detector's
// central face checked against SSD's, as Tiny with SecondDetector gives it
// (the combination verify measured best): the same face, landmarks and
// flags on a photo where the second detector decides.
func TestCentralWithBoth(t *testing.T) {
	img := lfwImage(t, "Gary_Winnick", 2)
	md := datadir.ModelDirForTest(t)
	both, err := NewPipeline(Options{ModelDir: md})
	if err != nil {
		t.Fatal(err)
	}
	if both.Options().Detector != Both {
		t.Fatalf("default detector %q, want %q", both.Options().Detector, Both)
	}
	second, err := NewPipeline(Options{ModelDir: md, Detector: Tiny, SecondDetector: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := both.Central(img)
	if err != nil {
		t.Fatal(err)
	}
	g, err := second.Central(img)
	if err != nil {
		t.Fatal(err)
	}
	if f.Box != g.Box || f.Landmarks != g.Landmarks || f.SecondDetector != g.SecondDetector || f.LowScore != g.LowScore || !f.SecondDetector {
		t.Errorf("Both: %+v %v %v; Tiny with SecondDetector: %+v %v %v", f.Box, f.SecondDetector, f.LowScore, g.Box, g.SecondDetector, g.LowScore)
	}
}
