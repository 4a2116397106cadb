package dataset

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

func TestParseMTFL(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "mtfl_list.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseMTFL(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []MTFLFace{
		{Path: "net_7876/0_0_0.jpg", Points: FivePoints{{30.4, 29.6}, {49.4, 29.8}, {42, 39}, {32.4, 47.6}, {47.2, 47.2}}},
		{Path: "lfw_5590/Aaron_Eckhart_0001.jpg", Points: FivePoints{{107.25, 108.75}, {147.75, 113.25}, {126.25, 143.75}, {106.25, 158.75}, {140.75, 162.75}},
			Gender: 1, Smile: 2, Glasses: 2, Pose: 3},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d faces, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("face %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseMTFLErrors(t *testing.T) {
	const pts = " 1 2 3 4 5 6 7 8 9 10"
	cases := []struct{ name, in, want string }{
		{"too few fields", "a.jpg 1 2 3", "got 4 fields"},
		{"attributes cut short", "a.jpg" + pts + " 1 2", "got 13 fields"},
		{"not a number", "a.jpg 1 2 3 4 5 6 7 8 9 x", `bad coordinate "x"`},
		{"not finite", "a.jpg 1 2 3 4 5 6 7 8 9 NaN", "bad coordinate"},
		{"huge", "a.jpg 1 2 3 4 5 6 7 8 9 1e9", "bad coordinate"},
		{"gender 3", "a.jpg" + pts + " 3 1 1 3", "attribute 1"},
		{"pose 6", "a.jpg" + pts + " 1 1 1 6", "attribute 4"},
		{"leaves the folder", "../secret.jpg" + pts, "not inside the folder"},
		{"absolute", "/etc/x.jpg" + pts, "not inside the folder"},
		{"absolute, backslashes", `\etc\x.jpg` + pts, "not inside the folder"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMTFL(strings.NewReader(tc.in + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func FuzzParseMTFL(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "mtfl_list.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("a.jpg 1 2 3 4 5 6 7 8 9 10 2 2 2 5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		faces, err := ParseMTFL(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, fc := range faces {
			if !filepath.IsLocal(fc.Path) || strings.Contains(fc.Path, `\`) {
				t.Fatalf("accepted path %q", fc.Path)
			}
			for _, p := range fc.Points {
				for _, v := range p {
					if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1e5 {
						t.Fatalf("accepted coordinate %g", v)
					}
				}
			}
			if fc.Gender > 2 || fc.Smile > 2 || fc.Glasses > 2 || fc.Pose > 5 || fc.Gender < 0 || fc.Pose < 0 {
				t.Fatalf("accepted attributes %+v", fc)
			}
		}
	})
}

// TestToLFWFrameLandsPoints draws five dots at a rotated, scaled and
// shifted copy of LFW's five points and checks that the warp puts each dot
// back on its LFW position.
func TestToLFWFrameLandsPoints(t *testing.T) {
	const scale, angle, dx, dy = 0.4, 0.2, 3.0, -5.0
	var pts FivePoints
	m := imaging.NewRGB(80, 80)
	for k, p := range LFWFivePoints {
		x, y := p[0]-125, p[1]-125
		pts[k] = [2]float64{40 + dx + scale*(x*math.Cos(angle)-y*math.Sin(angle)), 40 + dy + scale*(x*math.Sin(angle)+y*math.Cos(angle))}
		m.DrawDot(pts[k][0], pts[k][1], 1, 255, 255, 255)
	}
	w, err := toLFWFrame(m, pts)
	if err != nil {
		t.Fatal(err)
	}
	if w.W != LFWFrame || w.H != LFWFrame {
		t.Fatalf("warped to %d×%d", w.W, w.H)
	}
	for k, p := range LFWFivePoints {
		// Intensity-weighted centre of the 21×21 window around p.
		var sx, sy, sw float64
		for y := int(p[1]) - 10; y <= int(p[1])+10; y++ {
			for x := int(p[0]) - 10; x <= int(p[0])+10; x++ {
				r, _, _ := w.At(x, y)
				sx += float64(r) * float64(x)
				sy += float64(r) * float64(y)
				sw += float64(r)
			}
		}
		if sw == 0 {
			t.Fatalf("point %d: no dot near %v", k, p)
		}
		if d := math.Hypot(sx/sw-p[0], sy/sw-p[1]); d > 1.5 {
			t.Errorf("point %d landed at (%.1f, %.1f), %.1f px from %v", k, sx/sw, sy/sw, d, p)
		}
	}
	if _, err := toLFWFrame(m, FivePoints{}); err == nil {
		t.Error("no error for five coinciding points")
	}
}

func TestMTFLPublicImagesLeaveOutLFW(t *testing.T) {
	dir := datadir.ForTest(t, "mtfl")
	ims, err := MTFL{Dir: dir}.PublicImages()
	if err != nil {
		t.Fatal(err)
	}
	if len(ims) != 5849 {
		t.Errorf("%d net_7876 faces, want 5849", len(ims))
	}
	for _, im := range ims {
		if strings.Contains(im.Path, "lfw_5590") || im.Points == nil {
			t.Fatalf("image %+v", im)
		}
	}
	s, err := Load(ims[:3], LoadOptions{Side: 64, Crop: 128, Augment: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 || s.Classes() != 3 || s.Stored != 72 {
		t.Errorf("loaded %d images, %d classes, stored side %d", s.Len(), s.Classes(), s.Stored)
	}
	if _, err := (MTFL{Dir: t.TempDir()}).PublicImages(); err == nil {
		t.Error("no error for a folder without new_training.txt")
	}
}
