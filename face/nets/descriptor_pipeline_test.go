package nets

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// faBox is a rectangle in faces.json.
type faBox struct{ X, Y, Width, Height float64 }

// faFace is the part of one faces.json face these tests use.
type faFace struct {
	DetectionBox          faBox        `json:"detection_box"`
	LandmarkCropBox       faBox        `json:"landmark_crop_box"`
	Landmarks68           [][2]float64 `json:"landmarks68"`
	DlibAlignRectClipped  faBox        `json:"dlib_align_rect_clipped"`
	AlignedMinBBoxClipped faBox        `json:"aligned_rect_minbbox_clipped"`
	Descriptor            []float64    `json:"descriptor"`
	Age                   float64      `json:"age"`
	Gender                string       `json:"gender"`
	GenderProbability     float64      `json:"genderProbability"`
}

func faCrop(t *testing.T, img *imaging.RGB, b faBox) *imaging.RGB {
	t.Helper()
	c, err := img.Crop(int(b.X), int(b.Y), int(b.Width), int(b.Height))
	if err != nil {
		t.Fatal(err)
	}
	if c.W != int(b.Width) || c.H != int(b.Height) {
		t.Fatalf("crop %v gave %d×%d", b, c.W, c.H)
	}
	return c
}

// TestPreprocessingAndNetsMatchFacesJSON runs the three networks through
// their preprocessing helpers on the crops face-api used for sample1's
// first SSD face and compares with faces.json: descriptor, absolute
// landmarks (via LandmarksToImage) and age/gender.
func TestPreprocessingAndNetsMatchFacesJSON(t *testing.T) {
	data, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "faces.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Images []struct {
			File string
			SSD  []faFace `json:"ssd"`
			Tiny []faFace `json:"tiny"`
		}
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Images) == 0 || len(ref.Images[0].SSD) == 0 || len(ref.Images[0].Tiny) == 0 {
		t.Fatal("faces.json has no sample1 SSD or tiny face")
	}
	face := ref.Images[0].SSD[0]
	img, _, err := imaging.DecodeFile(datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg"), imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("descriptor", func(t *testing.T) {
		in := DescriptorInput(faCrop(t, img, face.DlibAlignRectClipped))
		got, err := testDescriptor(t).Compute([]*imaging.Float{in})
		if err != nil {
			t.Fatal(err)
		}
		if e := faL2(got[0], face.Descriptor); e > 1e-4 {
			t.Errorf("L2 distance to faces.json descriptor = %g", e)
		} else {
			t.Logf("L2 distance to faces.json descriptor = %.3g", e)
		}
	})
	// The SSD pipeline uses the full landmark net, the tiny one the tiny net.
	for _, tc := range []struct {
		name string
		tiny bool
		face faFace
	}{{"landmarks", false, face}, {"landmarks tiny", true, ref.Images[0].Tiny[0]}} {
		tiny, face := tc.tiny, tc.face
		t.Run(tc.name, func(t *testing.T) {
			crop := faCrop(t, img, face.LandmarkCropBox)
			in, lc := LandmarkInput(crop)
			raw, err := testLandmarker(t, tiny).Compute([]*imaging.Float{in})
			if err != nil {
				t.Fatal(err)
			}
			abs := LandmarksToImage(raw[0], lc, face.DetectionBox.X, face.DetectionBox.Y)
			if len(face.Landmarks68) != 68 {
				t.Fatalf("faces.json has %d landmarks", len(face.Landmarks68))
			}
			var worst float64
			for i := range 68 {
				worst = max(worst, math.Abs(abs[i][0]-face.Landmarks68[i][0]), math.Abs(abs[i][1]-face.Landmarks68[i][1]))
			}
			if worst > 0.01 {
				t.Errorf("largest landmark difference %.4g px", worst)
			}
			t.Logf("largest landmark difference %.3g px of the image", worst)
		})
	}
	t.Run("age gender", func(t *testing.T) {
		in := AgeGenderInput(faCrop(t, img, face.AlignedMinBBoxClipped))
		got, err := testAgeGender(t).Compute([]*imaging.Float{in})
		if err != nil {
			t.Fatal(err)
		}
		g, p := got[0].Gender()
		if math.Abs(float64(got[0].Age)-face.Age) > 1e-3 || g != face.Gender || math.Abs(float64(p)-face.GenderProbability) > 1e-4 {
			t.Errorf("age %g %s %g, want %g %s %g", got[0].Age, g, p, face.Age, face.Gender, face.GenderProbability)
		}
	})
}
