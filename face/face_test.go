package face

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

type refBox struct{ X, Y, Width, Height float64 }

type refFace struct {
	Score           float64      `json:"score"`
	DetectionBox    refBox       `json:"detection_box"`
	Landmarks68     [][2]float64 `json:"landmarks68"`
	DlibAlignRectCl refBox       `json:"dlib_align_rect_clipped"`
	Descriptor      []float64    `json:"descriptor"`
	Age             float64      `json:"age"`
	Gender          string       `json:"gender"`
	GenderProb      float64      `json:"genderProbability"`
}

type refImage struct {
	File string    `json:"file"`
	SSD  []refFace `json:"ssd"`
	Tiny []refFace `json:"tiny"`
}

func loadRef(t *testing.T) []refImage {
	t.Helper()
	raw, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "faces.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Images []refImage `json:"images"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Images
}

// TestEndToEndAgainstFaceAPI runs both of face-api's pipelines on its six
// demo photos and compares every face with the reference computed by TF.js:
// same face count, boxes within 0.5 px, landmarks within 0.05 px,
// descriptors (face-api alignment) within 1e-3 in L2, age and gender.
func TestEndToEndAgainstFaceAPI(t *testing.T) {
	refs := loadRef(t)
	for _, det := range []Detector{SSD, Tiny} {
		p, err := NewPipeline(Options{Detector: det, Align: AlignFaceAPI, AgeGender: true, Descriptors: true,
			TinyLandmarks: det == Tiny, ModelDir: datadir.ModelDirForTest(t)})
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range refs {
			want := ref.SSD
			if det == Tiny {
				want = ref.Tiny
			}
			t.Run(string(det)+"/"+ref.File, func(t *testing.T) {
				img, _, err := imaging.DecodeFile(datadir.ForTest(t, "faceapi-reference", "images", ref.File), imaging.DefaultLimits())
				if err != nil {
					t.Fatal(err)
				}
				got, _, err := p.Run(img)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%d faces, face-api found %d", len(got), len(want))
				}
				for i, w := range want {
					g := got[i]
					b := g.Box
					if d := maxAbs(b.X-w.DetectionBox.X, b.Y-w.DetectionBox.Y, b.Width-w.DetectionBox.Width, b.Height-w.DetectionBox.Height); d > 0.5 {
						t.Errorf("face %d: box %+v, want %+v", i, b, w.DetectionBox)
					}
					var lm float64
					for k := range 68 {
						lm = math.Max(lm, maxAbs(g.Landmarks[k][0]-w.Landmarks68[k][0], g.Landmarks[k][1]-w.Landmarks68[k][1]))
					}
					if lm > 0.05 {
						t.Errorf("face %d: landmarks off by up to %.4f px", i, lm)
					}
					x, y, bw, bh := FaceAPIAlignBox(&g.Landmarks, img.W, img.H)
					if r := w.DlibAlignRectCl; float64(x) != r.X || float64(y) != r.Y || float64(bw) != r.Width || float64(bh) != r.Height {
						t.Errorf("face %d: align crop %d,%d %dx%d, want %+v", i, x, y, bw, bh, r)
					}
					var l2 float64
					for k, v := range w.Descriptor {
						d := float64(g.Descriptor[k]) - v
						l2 += d * d
					}
					if l2 = math.Sqrt(l2); l2 > 1e-3 {
						t.Errorf("face %d: descriptor differs by %.2e in L2", i, l2)
					}
					if math.Abs(g.Age-w.Age) > 0.05 || g.Gender != w.Gender || math.Abs(g.GenderProb-w.GenderProb) > 1e-3 {
						t.Errorf("face %d: age %.3f %s %.4f, want %.3f %s %.4f", i, g.Age, g.Gender, g.GenderProb, w.Age, w.Gender, w.GenderProb)
					}
				}
			})
		}
	}
}

func maxAbs(v ...float64) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// TestDlibChipIsRotationInvariant checks dlib alignment against its own
// expectation: a face rotated and scaled in the photo gives the same chip,
// and the chip puts the five landmarks on dlib's template.
func TestDlibChipIsRotationInvariant(t *testing.T) {
	refs := loadRef(t)
	img, _, err := imaging.DecodeFile(datadir.ForTest(t, "faceapi-reference", "images", refs[0].File), imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	var lm Landmarks
	for k := range 68 {
		lm[k] = [2]float64{refs[0].SSD[0].Landmarks68[k][0], refs[0].SSD[0].Landmarks68[k][1]}
	}
	chip, err := DlibChip(img, &lm, 150)
	if err != nil {
		t.Fatal(err)
	}
	// Rotate the photo by 25° and scale by 0.8 about a point, with the landmarks.
	th, s := 25*math.Pi/180, 0.8
	fwd := imaging.Affine{s * math.Cos(th), -s * math.Sin(th), 300, s * math.Sin(th), s * math.Cos(th), -100}
	inv, err := fwd.Invert()
	if err != nil {
		t.Fatal(err)
	}
	rot := imaging.WarpAffine(img, inv, img.W, img.H)
	var lm2 Landmarks
	for k := range lm {
		x, y := fwd.Apply(lm[k][0], lm[k][1])
		lm2[k] = [2]float64{x, y}
	}
	chip2, err := DlibChip(rot, &lm2, 150)
	if err != nil {
		t.Fatal(err)
	}
	var diff float64
	for i := range chip.Pix {
		diff += math.Abs(float64(chip.Pix[i]) - float64(chip2.Pix[i]))
	}
	if mean := diff / float64(len(chip.Pix)); mean > 6 {
		t.Errorf("chips of the rotated photo differ by %.2f grey levels on average", mean)
	}
	// The similarity fit of real landmarks leaves small residuals: each
	// template point should land within a few chip pixels of its landmark.
	idx := dlibTemplatePoints()
	if len(idx) != 33 {
		t.Fatalf("dlib aligns on %d points, want 33", len(idx))
	}
	from := make([][2]float64, len(idx))
	to := make([][2]float64, len(idx))
	for i, k := range idx {
		m := dlibMeanFace[k-17]
		from[i] = [2]float64{(dlibPadding + m[0]) / 1.5 * 150, (dlibPadding + m[1]) / 1.5 * 150}
		to[i] = lm[k]
	}
	a, err := imaging.EstimateSimilarity(from, to)
	if err != nil {
		t.Fatal(err)
	}
	scale := math.Hypot(a[0], a[3]) // image pixels per chip pixel
	// This face is turned (face-api puts its yaw near 60°), so the nose
	// bridge sits off the frontal template; the mean residual stays small.
	var sum float64
	for i := range from {
		x, y := a.Apply(from[i][0], from[i][1])
		d := math.Hypot(x-to[i][0], y-to[i][1]) / scale
		sum += d
		if d > 15 {
			t.Errorf("template point %d (landmark %d) lands %.1f chip pixels from its landmark", i, idx[i], d)
		}
	}
	if mean := sum / float64(len(from)); mean > 5 {
		t.Errorf("template points land %.1f chip pixels from their landmarks on average", mean)
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		opt  Options
		want string
	}{
		{Options{Detector: "yolo"}, "detector"},
		{Options{Align: "mtcnn"}, "aligner"},
		{Options{MinScore: 1.5}, "minimum score"},
		{Options{MinScore: math.NaN()}, "minimum score"},
		{Options{MaxFaces: -1}, "max faces"},
	}
	for _, tc := range tests {
		_, err := NewPipeline(tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want mention of %q", tc.opt, err, tc.want)
		}
	}
	_, err := NewPipeline(Options{ModelDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "install-models.sh") {
		t.Errorf("missing models: err = %v, want install hint", err)
	}
}
