package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// TestFaceNumbersAgree: veil detect and veil compare find the same faces
// of a group photo with their default detector and number them alike,
// from 1: detect's listing, its JSON and the numbers --draw puts next to
// each box, and compare's listing and --face-b. Before, detect ran both
// detectors and counted from 0, compare ran the tiny one (other faces, in
// another order) and counted from 0, and search counted from 1.
func TestFaceNumbersAgree(t *testing.T) {
	models := datadir.ModelDirForTest(t)
	group := datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg")
	drawn := filepath.Join(t.TempDir(), "numbers.png")
	code, out, errs := run(t, "detect", "--models", models, "--no-age-gender", "--json", "-q", "--draw", drawn, group)
	if code != 0 {
		t.Fatalf("detect: exit %d: %s", code, errs)
	}
	var doc struct {
		Images []struct {
			Faces []struct {
				Number int      `json:"number"`
				Box    face.Box `json:"box"`
			} `json:"faces"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	faces := doc.Images[0].Faces
	if len(faces) < 2 {
		t.Fatalf("%d faces in %s, want several", len(faces), group)
	}
	img, _, err := imaging.DecodeFile(drawn, imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	for k, f := range faces {
		if f.Number != k+1 {
			t.Errorf("detect's face %d is numbered %d", k+1, f.Number)
		}
		x, y, scale := labelPlace(img, f.Box, f.Number)
		if n, ok := img.ReadLabel(int(x), int(y), scale, len(fmt.Sprint(f.Number))); !ok || n != f.Number {
			t.Errorf("the drawing's tag beside face %d's box reads %d (%v)", f.Number, n, ok)
		}
	}
	code, text, _ := run(t, "detect", "--models", models, "--no-age-gender", "-q", group)
	if code != 0 || !strings.Contains(text, "  face 1: box") || strings.Contains(text, "  face 0:") {
		t.Errorf("detect's listing does not count from 1: %s", text)
	}
	one := lfwPhoto(t, "Abdullah_Gul", 13)
	for _, f := range faces {
		r := compareJSON(t, "compare", "--models", models, "--face-b", fmt.Sprint(f.Number), one, group)
		if len(r.B.Faces) != len(faces) || r.B.Compared != f.Number || r.B.Box != f.Box {
			t.Fatalf("compare --face-b %d: %d faces, compared %d with box %+v; detect's face %d has box %+v",
				f.Number, len(r.B.Faces), r.B.Compared, r.B.Box, f.Number, f.Box)
		}
		for k, g := range r.B.Faces {
			if g.Number != k+1 || g.Box != faces[k].Box {
				t.Errorf("compare's face %d (number %d, box %+v) is not detect's (box %+v)", k+1, g.Number, g.Box, faces[k].Box)
			}
		}
	}
	code, text, _ = run(t, "compare", "--models", models, "-q", one, group)
	if code != 0 || !strings.Contains(text, "  face 1: box") || strings.Contains(text, "  face 0:") {
		t.Errorf("compare's listing does not count from 1: %s", text)
	}
}
