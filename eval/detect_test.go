package eval

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
)

// FuzzReadDetections: a detections file is parsed without panicking, and
// whatever it accepts has valid sizes, copies, second passes and kinds.
func FuzzReadDetections(f *testing.F) {
	f.Add([]byte(`{"header":"` + DetectHeader() + `"}` + "\n" + `{"path":"a.jpg","copy":"grey","w":250,"h":250,"ssd":[[1,2,3,4,0.5]],"pass2":"ran","retry_tiny":[[1,2,3,4,0.6]],"kinds":["dark"]}` + "\n"))
	f.Add([]byte(`{"header":"` + detectHeaderV1() + `"}` + "\n" + `{"path":"a.jpg","copy":"sepia","w":0}`))
	f.Add([]byte(`{"header":"` + DetectHeader() + `"}` + "\n" + `{"path":"a.jpg","copy":"grey","w":2,"h":2,"pass2":"maybe","kinds":["odd"]}` + "\n"))
	f.Add([]byte("{\"header\""))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "d.jsonl")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		have, n, err := ReadDetections(p)
		if err != nil {
			return
		}
		if n > int64(len(data)) || (n > 0 && data[n-1] != '\n') {
			t.Fatalf("complete length %d of %d bytes", n, len(data))
		}
		for path, copies := range have {
			for _, d := range copies {
				if d == nil {
					continue
				}
				if d.W <= 0 || d.H <= 0 || d.Name != filepath.Base(path) || (d.Det.Retry != nil) != (d.pass2 == "ran") {
					t.Fatalf("accepted %+v for %q", d, path)
				}
			}
		}
	})
}

// TestReadDetectionsRefuses: files a run must not mix in are refused
// with the line and what is wrong.
func TestReadDetectionsRefuses(t *testing.T) {
	head := `{"header":"` + DetectHeader() + `"}` + "\n"
	for _, tc := range []struct{ name, data, want string }{
		{"other settings", `{"header":"veil bench detect v0"}` + "\n", "other settings"},
		{"bad copy", head + `{"path":"a.jpg","copy":"sepia","w":2,"h":2}` + "\n", "bad copy"},
		{"bad size", head + `{"path":"a.jpg","copy":"grey","w":0,"h":2}` + "\n", "bad copy"},
		{"bad pass", head + `{"path":"a.jpg","copy":"grey","w":2,"h":2,"pass2":"maybe"}` + "\n", "bad second pass"},
		{"retry without pass", head + `{"path":"a.jpg","copy":"grey","w":2,"h":2,"retry_ssd":[[1,2,3,4,0.5]]}` + "\n", "bad second pass"},
		{"unknown kind", head + `{"path":"a.jpg","copy":"grey","w":2,"h":2,"kinds":["odd"]}` + "\n", "unknown kind"},
		{"not json", head + "{\n", "line 2"},
	} {
		p := filepath.Join(t.TempDir(), "d.jsonl")
		if err := os.WriteFile(p, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadDetections(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestTuneRule: on made-up detections where the labelled faces are seen by
// SSD at 0.04 and by the tiny detector at 0.35 (boxes overlapping by IoU
// 0.71), and false pairs in a corner at 0.025 and 0.35, the tuned rule
// accepts the first and not the second: pair SSD threshold 0.03 (above
// the corner's 0.025, below the faces' 0.04), and of the rest the highest
// that still admit the faces (ties go to higher thresholds): pair tiny
// 0.35 (a score equal to the threshold passes), pair IoU 0.6.
func TestTuneRule(t *testing.T) {
	n := func(x, y, w, h, s float64) nets.Detection { return nets.Detection{X: x, Y: y, W: w, H: h, Score: s} }
	labelled := DetectImage{W: 250, H: 250, Det: face.Detections{
		SSD:  []nets.Detection{n(75, 65, 100, 120, 0.04)},
		Tiny: []nets.Detection{n(65, 80, 120, 100, 0.35)}}}
	corner := DetectImage{W: 250, H: 250, Det: face.Detections{
		SSD:  []nets.Detection{n(75, 65, 100, 120, 0.9), n(0, 0, 40, 50, 0.025)},
		Tiny: []nets.Detection{n(0, 5, 45, 40, 0.35)}}}
	var train [2][]DetectImage
	for range 10 {
		train[0] = append(train[0], labelled)
	}
	for range 3 {
		train[1] = append(train[1], corner)
	}
	got := TuneDetectRule(train, 2)
	want := face.Rule{SSD: 0.5, Tiny: 0.5, PairSSD: 0.03, PairTiny: 0.35, PairIoU: 0.6}
	if got.Rule != want || got.Found != 13 || got.Other != 0 || got.Tried != len(TunePairSSD)*len(TunePairTiny)*len(TunePairIoU) {
		t.Fatalf("tuned %+v, want rule %+v finding 13 with no other face", got, want)
	}
	if iou := (face.Box{X: 75, Y: 65, Width: 100, Height: 120}).IoU(face.Box{X: 65, Y: 80, Width: 120, Height: 100}); !(iou > 0.6 && iou < 0.75) {
		t.Fatalf("test geometry: IoU %g", iou)
	}
}

// TestMeasureByKind: a rule's row counts found faces per kind, a second
// pass counts only for both+retry, and in the side crops every face is
// another face.
func TestMeasureByKind(t *testing.T) {
	n := func(x, y, w, h, s float64) nets.Detection { return nets.Detection{X: x, Y: y, W: w, H: h, Score: s} }
	central := n(75, 65, 100, 120, 0.9)
	imgs := []DetectImage{
		{Name: "a", W: 250, H: 250, Kinds: []string{"plain"}, Det: face.Detections{SSD: []nets.Detection{central}}},
		{Name: "b", W: 250, H: 250, Kinds: []string{"dark", "small"}, Det: face.Detections{Retry: &face.Detections{Tiny: []nets.Detection{central}}}},
		{Name: "c", W: 250, H: 250, Kinds: []string{"dark"}},
	}
	rules := map[string]DetectRule{}
	for _, r := range DetectRules(face.DefaultRule(), nil) {
		rules[r.Name] = r
	}
	both := rules["both"].Measure("test", "colour", imgs, true)
	retry := rules["both+retry"].Measure("test", "colour", imgs, true)
	if both.Found != 1 || retry.Found != 2 || len(retry.Missed) != 1 || retry.Missed[0] != "c" {
		t.Fatalf("both %+v, both+retry %+v", both, retry)
	}
	want := []KindCount{{"plain", 1, 1, 1}, {"dark", 2, 1, 0.5}, {"small", 1, 1, 1}}
	if len(retry.ByKind) != len(want) {
		t.Fatalf("by kind %+v, want %+v", retry.ByKind, want)
	}
	for i := range want {
		if retry.ByKind[i] != want[i] {
			t.Errorf("by kind %+v, want %+v", retry.ByKind[i], want[i])
		}
	}
	free := rules["both+retry"].Measure(SideSet, "grey", imgs, true)
	if free.Found != 0 || free.Other != 2 || len(free.Missed) != 0 {
		t.Errorf("side-crop row %+v, want 2 other faces and nothing found or missed", free)
	}
}

// TestDefaultRuleIsTuned: face.DefaultRule is what TuneDetectRule chooses
// on the detections of its training images. The testdata file is the
// --detections file of `veil bench detect --tune --train-every 18` on
// LFW's development training pairs (192 images, colour and grey), pruned
// of boxes no rule of the grid can accept or pair (tiny boxes below 0.1;
// SSD boxes below 0.5 overlapping no remaining tiny box by IoU 0.3), with
// paths relative to the data folder (a file of the first version: first
// pass only). It fails when the rule, the grid, the objective or the
// networks' weights (the file's header) change without re-tuning.
func TestDefaultRuleIsTuned(t *testing.T) {
	gz, err := os.Open(filepath.Join("testdata", "detect-devtrain-every18.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dets.jsonl")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	have, _, err := ReadDetections(path)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(have))
	for p := range have {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var train [2][]DetectImage
	for _, p := range paths {
		for c := range train {
			if have[p][c] == nil {
				t.Fatalf("%s has no %s copy", p, DetectCopies[c])
			}
			train[c] = append(train[c], *have[p][c])
		}
	}
	if len(paths) != 192 {
		t.Fatalf("%d images, want 192", len(paths))
	}
	got := TuneDetectRule(train, 2)
	// Found and other faces as the full run reported them (before pruning).
	if got.Rule != face.DefaultRule() || got.Found != 364 || got.Other != 23 {
		t.Errorf("tuned %+v (found %d, other %d); DefaultRule is %+v (found 364, other 23 on these images)", got.Rule, got.Found, got.Other, face.DefaultRule())
	}
}
