package cli

import (
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// lfwPhoto is a deep-funnelled LFW image from the shared data.
func lfwPhoto(t *testing.T, name string, n int) string {
	t.Helper()
	return datadir.ForTest(t, "lfw", "images_deepfunneled", name, fmt.Sprintf("%s_%04d.jpg", name, n))
}

// compareJSON runs compare (or verify) with --json, which must succeed,
// and decodes the report.
func compareJSON(t *testing.T, args ...string) compareReport {
	t.Helper()
	code, stdout, stderr := run(t, append(args, "--json", "-q")...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	var r compareReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("report %q: %v", stdout, err)
	}
	return r
}

// embedDoc is `veil embed --json`'s output.
type embedDoc struct {
	Images []struct {
		Path  string `json:"path"`
		Faces []struct {
			Box        face.Box     `json:"box"`
			Landmarks  [][2]float64 `json:"landmarks"`
			Descriptor []float32    `json:"descriptor"`
			Embedding  []float32    `json:"embedding"`
		} `json:"faces"`
	} `json:"images"`
	Head *headInfo `json:"head"`
}

func embedJSON(t *testing.T, args ...string) embedDoc {
	t.Helper()
	code, stdout, stderr := run(t, append([]string{"embed", "--json", "-q"}, args...)...)
	if code != 0 {
		t.Fatalf("embed %v: exit %d: %s", args, code, stderr)
	}
	var d embedDoc
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatalf("embed output %q: %v", stdout, err)
	}
	return d
}

// largestDescriptor is the descriptor of the largest face embed found.
func largestDescriptor(t *testing.T, d embedDoc, i int) []float32 {
	t.Helper()
	var faces []face.Face
	for _, f := range d.Images[i].Faces {
		faces = append(faces, face.Face{Box: f.Box})
	}
	k := face.Largest(faces)
	if k < 0 {
		t.Fatalf("%s: no face", d.Images[i].Path)
	}
	if v := d.Images[i].Faces[k].Descriptor; v != nil {
		return v
	}
	return d.Images[i].Faces[k].Embedding
}

// TestCompareLFWPairs compares a same-person and a different-person pair
// of LFW's development test pairs: the verdicts, the measured threshold
// and its meaning, the compared faces, a distance equal to that of the
// largest faces' descriptors from veil embed, and veil verify given the
// two photos answering exactly as compare does.
func TestCompareLFWPairs(t *testing.T) {
	models := datadir.ModelDirForTest(t)
	cases := []struct {
		name string
		a, b string
		same bool
	}{
		{"same person", lfwPhoto(t, "Abdullah_Gul", 13), lfwPhoto(t, "Abdullah_Gul", 14), true},
		// The tiny detector scores Zach_Safrin_0001's face 0.499, SSD 0.81:
		// the default, both, finds it.
		{"different people", lfwPhoto(t, "AJ_Lamas", 1), lfwPhoto(t, "Zach_Safrin", 1), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, cmpOut, stderr := run(t, "compare", "--models", models, "--json", "-q", c.a, c.b)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var r compareReport
			if err := json.Unmarshal([]byte(cmpOut), &r); err != nil {
				t.Fatalf("report %q: %v", cmpOut, err)
			}
			if r.Same != c.same {
				t.Errorf("same = %v at distance %.4f, want %v", r.Same, r.Distance, c.same)
			}
			if r.Threshold != eval.DescriptorThreshold || r.Metric != eval.Euclidean || r.Vectors != "descriptor" || r.Head != nil {
				t.Errorf("threshold %v (%s, %s, head %v), want the measured %v on descriptors", r.Threshold, r.Metric, r.Vectors, r.Head, eval.DescriptorThreshold)
			}
			if r.SameRight == nil || *r.SameRight != eval.DescriptorSameRate || r.DifferentRight == nil || *r.DifferentRight != eval.DescriptorDifferentRate ||
				!strings.Contains(r.Meaning, "same-person pairs") || !strings.Contains(r.ThresholdSource, "pairsDevTrain") {
				t.Errorf("threshold meaning missing: %+v", r)
			}
			for _, ph := range []comparedPhoto{r.A, r.B} {
				if len(ph.Faces) == 0 || ph.Compared < 1 || ph.Compared > len(ph.Faces) || ph.Box != ph.Faces[ph.Compared-1].Box || ph.Chosen != "largest" || ph.Width != 250 || ph.Detector != "both" {
					t.Errorf("photo %+v: want the compared face's box among the listed faces", ph)
				}
			}
			var da, db embedDoc
			ib := 1
			if r.B.Detector == r.A.Detector {
				da = embedJSON(t, "--models", models, "--detector", r.A.Detector, c.a, c.b)
				db = da
			} else {
				da = embedJSON(t, "--models", models, "--detector", r.A.Detector, c.a)
				ib, db = 0, embedJSON(t, "--models", models, "--detector", r.B.Detector, c.b)
			}
			want, err := eval.Distance(largestDescriptor(t, da, 0), largestDescriptor(t, db, ib))
			if err != nil {
				t.Fatal(err)
			}
			if r.Distance != want {
				t.Errorf("distance %v, but the largest faces' descriptors from veil embed are %v apart", r.Distance, want)
			}
			if _, verOut, _ := run(t, "verify", "--models", models, "--json", "-q", c.a, c.b); verOut != cmpOut {
				t.Errorf("veil verify with two photos answered\n%s\ncompare\n%s", verOut, cmpOut)
			}
		})
	}
	code, stdout, stderr := run(t, "compare", "--models", models, "-q", cases[1].a, cases[1].b)
	if code != 0 || !strings.Contains(stdout, "different people") || !strings.Contains(stdout, "<- compared") ||
		!strings.Contains(stdout, "found by both detectors") || !strings.Contains(stdout, "of different-person pairs") {
		t.Errorf("text output (exit %d): %s%s", code, stdout, stderr)
	}
	// --threshold replaces the measured one, and the verdict follows it.
	r := compareJSON(t, "compare", "--models", models, "--threshold", "0.01", cases[0].a, cases[0].b)
	if r.Same || r.Threshold != 0.01 || r.ThresholdSource != "--threshold" || r.Meaning != "" {
		t.Errorf("--threshold 0.01: %+v", r)
	}
}

// TestCompareGreyPhoto: a greyscale copy of LFW's Barbara_Bach_0001,
// whose face neither network scores 0.5 (tiny 0.465, SSD 0.178, boxes
// overlapping by IoU 0.72), is compared with the colour photo: the tiny
// detector finds nothing, both together find the face, and the verdict is
// the same person. Before, compare tried SSD alone and failed with "no
// face found".
func TestCompareGreyPhoto(t *testing.T) {
	models := datadir.ModelDirForTest(t)
	colour := lfwPhoto(t, "Barbara_Bach", 1)
	img, _, err := imaging.DecodeFile(colour, imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	grey := writeFile(t, t.TempDir(), "barbara-grey.png", encodePNG(t, img.Grey().Image()))
	r := compareJSON(t, "compare", "--models", models, colour, grey)
	if !r.Same || r.A.Detector != "both" || r.B.Detector != "both" || len(r.B.Faces) != 1 {
		t.Errorf("same %v at %.3f; faces found by %s and %s (%d in the grey photo), want the same person, both and both",
			r.Same, r.Distance, r.A.Detector, r.B.Detector, len(r.B.Faces))
	}
	if b := r.B.Box; !(b.X < 125 && b.X+b.Width > 125 && b.Y < 125 && b.Y+b.Height > 125) {
		t.Errorf("compared box %+v does not hold the centre", b)
	}
}

// TestCompareChoosesFaces: of a photo with several faces the largest is
// compared unless --face-b names another, and the report says which.
func TestCompareChoosesFaces(t *testing.T) {
	models := datadir.ModelDirForTest(t)
	group := datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg")
	one := lfwPhoto(t, "Abdullah_Gul", 13)
	r := compareJSON(t, "compare", "--models", models, one, group)
	if len(r.B.Faces) < 2 {
		t.Fatalf("%d faces in %s, want several", len(r.B.Faces), group)
	}
	for _, f := range r.B.Faces {
		if f.Box.Area() > r.B.Faces[r.B.Compared-1].Box.Area() {
			t.Errorf("face %d (area %.0f) is larger than the compared face %d", f.Number, f.Box.Area(), r.B.Compared)
		}
	}
	pick := r.B.Compared%len(r.B.Faces) + 1 // another face's number, from 1
	p := compareJSON(t, "compare", "--models", models, "--face-b", fmt.Sprint(pick), one, group)
	if p.B.Compared != pick || p.B.Chosen != "--face-b" || p.B.Box != r.B.Faces[pick-1].Box || p.Distance == r.Distance {
		t.Errorf("--face-b %d: compared %d (%s) box %+v at distance %v; want face %d's box %+v and another distance than %v",
			pick, p.B.Compared, p.B.Chosen, p.B.Box, p.Distance, pick, r.B.Faces[pick-1].Box, r.Distance)
	}
	if p.A.Compared != 1 || p.A.Chosen != "largest" {
		t.Errorf("photo A: compared %d by %s", p.A.Compared, p.A.Chosen)
	}
}

// TestCompareBadInputs: every mistake gives a message naming the problem
// (and the photo), never a panic or a silent answer.
func TestCompareBadInputs(t *testing.T) {
	models := datadir.ModelDirForTest(t)
	dir := t.TempDir()
	good := lfwPhoto(t, "Abdullah_Gul", 13)
	notImage := writeFile(t, dir, "notes.jpg", []byte("these are not pixels"))
	blank := image.NewRGBA(image.Rect(0, 0, 200, 160))
	for i := range blank.Pix {
		blank.Pix[i] = 200
	}
	blank.Set(0, 0, color.RGBA{0, 0, 0, 255})
	noFace := writeFile(t, dir, "wall.png", encodePNG(t, blank))
	missing := filepath.Join(dir, "absent.jpg")
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"missing file", []string{"compare", good, missing}, 1, []string{"absent.jpg"}},
		{"not an image", []string{"compare", notImage, good}, 1, []string{"notes.jpg"}},
		{"no face", []string{"compare", good, noFace}, 3, []string{"wall.png", "no face found by either detector", "--min-score"}},
		{"one photo", []string{"compare", good}, 1, []string{"two photos", "got 1"}},
		{"three photos", []string{"compare", good, good, good}, 1, []string{"two photos", "got 3"}},
		{"face out of range", []string{"compare", "--face-a", "2", good, good}, 1, []string{"has 1 face(s), numbered 1 to 1", "--face-a 2 is out of range"}},
		{"negative face", []string{"compare", "--face-b", "-4", good, good}, 1, []string{"--face-b must be a face number"}},
		{"negative threshold", []string{"compare", "--threshold", "-1", good, good}, 1, []string{"--threshold must be a positive"}},
		{"verify with one photo", []string{"verify", good}, 1, []string{"two photos", "--images and --pairs"}},
		{"verify with photos and pairs", []string{"verify", "--pairs", "p.txt", good, good}, 1, []string{"--pairs scores a pairs file"}},
		{"verify pairs with --face-a", []string{"verify", "--face-a", "0", "--images", dir, "--pairs", "p.txt"}, 1, []string{"--face-a applies to two photos"}},
		{"verify with nothing", []string{"verify"}, 1, []string{"give two photos", "--images and --pairs"}},
		{"verify: no face", []string{"verify", noFace, good}, 3, []string{"wall.png", "no face found"}},
	}
	for _, c := range cases {
		code, stdout, stderr := run(t, append(c.args, "--models", models)...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d (stdout %q, stderr %q)", c.name, code, c.code, stdout, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q does not mention %q", c.name, stderr, w)
			}
		}
		if strings.Contains(stderr, "panic") || stdout != "" {
			t.Errorf("%s: stdout %q, stderr %q", c.name, stdout, stderr)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatal("the missing photo exists")
	}
}
