package face

import (
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// TestFallbackTriesBothDetectorsOnAMiss: a greyscale copy of LFW's
// Barbara_Bach_0001, whose face neither network scores 0.5 (tiny 0.465,
// SSD 0.178): the tiny detector alone finds nothing, the Fallback finds
// the central face with Detector Both and says so. On the colour photo
// the tiny detector's own faces are returned and no second pipeline is
// built; a primary of Detector Both is not run twice.
func TestFallbackTriesBothDetectorsOnAMiss(t *testing.T) {
	md := datadir.ModelDirForTest(t)
	tiny, err := NewPipeline(Options{ModelDir: md, Detector: Tiny})
	if err != nil {
		t.Fatal(err)
	}
	colour := lfwImage(t, "Barbara_Bach", 1)
	grey := colour.Grey()
	if faces, err := tiny.Detect(grey); err != nil || len(faces) != 0 {
		t.Fatalf("tiny detector on the grey photo: %d faces, %v; want none (the miss this test is about)", len(faces), err)
	}

	tests := []struct {
		name         string
		img          *imaging.RGB
		wantDetector Detector
		wantFaces    int
		wantBuilt    bool // the Both pipeline was built
	}{
		{"colour: the tiny detector's face", colour, Tiny, 1, false},
		{"grey: both detectors' face", grey, Both, 1, true},
		{"blank: none, after both", imaging.NewRGB(250, 250), Both, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFallback(tiny)
			if err != nil {
				t.Fatal(err)
			}
			p, faces, err := f.Detect(tc.img)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Options().Detector; got != tc.wantDetector || len(faces) != tc.wantFaces || (f.both != nil) != tc.wantBuilt {
				t.Fatalf("found %d faces with %s (both built: %v), want %d with %s (%v)", len(faces), got, f.both != nil, tc.wantFaces, tc.wantDetector, tc.wantBuilt)
			}
			if f.Primary() != tiny {
				t.Errorf("Primary() is not the pipeline given")
			}
			if len(faces) > 0 && !faces[0].Box.Contains(float64(tc.img.W)/2, float64(tc.img.H)/2) {
				t.Errorf("face %+v does not hold the centre", faces[0].Box)
			}
		})
	}

	// A primary of Detector Both already ran both networks.
	both, err := NewPipeline(Options{ModelDir: md, Detector: Both})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFallback(both)
	if err != nil {
		t.Fatal(err)
	}
	if p, faces, err := f.Detect(imaging.NewRGB(250, 250)); err != nil || p != both || len(faces) != 0 || f.both != nil {
		t.Errorf("Both primary on a blank photo: pipeline %p (primary %p), %d faces, second built %v, err %v", p, both, len(faces), f.both != nil, err)
	}
	if _, err := NewFallback(nil); err == nil {
		t.Error("NewFallback(nil) accepted")
	}
}
