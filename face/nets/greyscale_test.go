package nets

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// greyRef is testdata/faceapi_grey.json, written by
// scripts/faceapi-ref/run.sh: face-api 1.7.15 itself (TF.js wasm backend)
// on LFW images and a demo photo, in colour and as greyscale copies
// (imaging.RGB.Grey's BT.601 luma), both detectors at score threshold 0.02,
// the best three detections of each.
type greyRef struct {
	Meta struct {
		FaceAPI string `json:"faceapi"`
		Backend string `json:"backend"`
		SSD     struct {
			MinConfidence float64 `json:"minConfidence"`
		} `json:"ssd_options"`
		Tiny struct {
			ScoreThreshold float64 `json:"scoreThreshold"`
		} `json:"tiny_options"`
	} `json:"meta"`
	Images []struct {
		Name   string      `json:"name"`
		Width  int         `json:"width"`
		Height int         `json:"height"`
		Colour greyRefCopy `json:"colour"`
		Grey   greyRefCopy `json:"grey"`
	} `json:"images"`
}

type greyRefCopy struct {
	SHA256 string       `json:"rgb_sha256"`
	SSD    []greyRefDet `json:"ssd"`
	Tiny   []greyRefDet `json:"tiny"`
}

type greyRefDet struct {
	Score float64    `json:"score"`
	Box   [4]float64 `json:"box"`
}

// greyRefKeep is how many detections per image and detector the
// reference keeps (KEEP in scripts/faceapi-ref/detect.js).
const greyRefKeep = 3

// TestGreyscaleMatchesFaceAPI runs Veil's SSD and tiny detector on the
// reference images in colour and greyscale and compares every detection
// with face-api's: scores within 1e-3, boxes within 1 px. It settles the
// issue's question: SSD's collapse on greyscale photos (LFW
// George_W_Bush_0001: 0.928 in colour, 0.050 in grey) is what face-api's
// network itself does, not a fault of the port.
func TestGreyscaleMatchesFaceAPI(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "faceapi_grey.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref greyRef
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if ref.Meta.FaceAPI != "1.7.15" || ref.Meta.Backend != "wasm" || len(ref.Images) < 5 {
		t.Fatalf("unexpected reference: face-api %q on %q, %d images", ref.Meta.FaceAPI, ref.Meta.Backend, len(ref.Images))
	}
	ssd, tiny := loadSSD(t), loadTiny(t)
	const scoreTol, boxTol = 1e-3, 1.0
	collapsed := 0
	var dev deviation
	for _, im := range ref.Images {
		t.Run(filepath.Base(im.Name), func(t *testing.T) {
			img, _, err := imaging.DecodeFile(datadir.ForTest(t, strings.Split(im.Name, "/")...), imaging.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if img.W != im.Width || img.H != im.Height {
				t.Fatalf("decoded %dx%d, reference %dx%d", img.W, img.H, im.Width, im.Height)
			}
			for _, c := range []struct {
				name string
				img  *imaging.RGB
				ref  greyRefCopy
			}{{"colour", img, im.Colour}, {"grey", img.Grey(), im.Grey}} {
				if sum := sha256.Sum256(c.img.Pix); hex.EncodeToString(sum[:]) != c.ref.SHA256 {
					t.Fatalf("%s: pixels differ from the ones face-api saw (sha256)", c.name)
				}
				s, err := ssd.Detect(c.img, SSDOptions{MinScore: ref.Meta.SSD.MinConfidence, MaxResults: 100, IoU: 0.5})
				if err != nil {
					t.Fatal(err)
				}
				dev.add(compareDetections(t, c.name+" ssd", s, c.ref.SSD, ref.Meta.SSD.MinConfidence, scoreTol, boxTol))
				d, err := tiny.Detect(c.img, TinyOptions{InputSize: 416, ScoreThreshold: ref.Meta.Tiny.ScoreThreshold, IoU: 0.4})
				if err != nil {
					t.Fatal(err)
				}
				dev.add(compareDetections(t, c.name+" tiny", d, c.ref.Tiny, ref.Meta.Tiny.ScoreThreshold, scoreTol, boxTol))
			}
			if len(im.Colour.SSD) > 0 && len(im.Grey.SSD) > 0 && im.Colour.SSD[0].Score > 0.9 && im.Grey.SSD[0].Score < 0.1 {
				collapsed++
			}
		})
	}
	t.Logf("largest deviation from face-api over %d detections: score %.2g, box %.2g px", dev.n, dev.score, dev.box)
	// The reference keeps photos on which face-api's SSD collapses in grey.
	if collapsed < 2 {
		t.Errorf("%d reference photos where SSD scores > 0.9 in colour and < 0.1 in grey; the set was chosen to hold several", collapsed)
	}
}

// compareDetections matches Veil's detections with face-api's: every
// reference detection has a Veil detection within tolerance, and every Veil
// detection that the reference would have listed (scoring clearly above
// its last kept score, or above the threshold when it kept fewer than
// greyRefKeep) has a reference one.
func compareDetections(t *testing.T, what string, got []Detection, want []greyRefDet, threshold, scoreTol, boxTol float64) deviation {
	t.Helper()
	var dev deviation
	near := func(g Detection, w greyRefDet) bool {
		return math.Abs(g.Score-w.Score) <= scoreTol &&
			math.Abs(g.X-w.Box[0]) <= boxTol && math.Abs(g.Y-w.Box[1]) <= boxTol &&
			math.Abs(g.W-w.Box[2]) <= boxTol && math.Abs(g.H-w.Box[3]) <= boxTol
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if near(g, w) {
				found = true
				dev.add(deviation{1, math.Abs(g.Score - w.Score),
					max(math.Abs(g.X-w.Box[0]), math.Abs(g.Y-w.Box[1]), math.Abs(g.W-w.Box[2]), math.Abs(g.H-w.Box[3]))})
			}
		}
		if !found {
			t.Errorf("%s: face-api's detection %.4f at %.1f has no match in Veil's %v", what, w.Score, w.Box, got)
		}
	}
	floor := threshold
	if len(want) == greyRefKeep {
		floor = want[len(want)-1].Score
	}
	for _, g := range got {
		if g.Score <= floor+scoreTol {
			continue
		}
		found := false
		for _, w := range want {
			found = found || near(g, w)
		}
		if !found {
			t.Errorf("%s: Veil's detection %.4f at (%.1f %.1f %.1f %.1f) is not in face-api's %v", what, g.Score, g.X, g.Y, g.W, g.H, want)
		}
	}
	return dev
}

// deviation is the largest difference seen between matched detections.
type deviation struct {
	n          int
	score, box float64
}

func (d *deviation) add(o deviation) {
	d.n += o.n
	d.score, d.box = max(d.score, o.score), max(d.box, o.box)
}
