package cli

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/internal/datadir"
)

func benchDetectJSON(t *testing.T, args ...string) detectReport {
	t.Helper()
	code, out, errOut := run(t, append([]string{"bench", "detect", "--models", datadir.ModelDirForTest(t), "--json", "-q"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep detectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return rep
}

// TestBenchDetect measures two LFW photos whose greyscale copies SSD
// misses (face-api's own network scores them 0.050 and 0.040 in grey,
// 0.928 and 0.678 in colour; see face/nets/testdata/faceapi_grey.json):
// the report has a row per copy and detector, SSD finds both faces in
// colour and neither in grey, and the combined rule finds all four. A
// second run reads the detections file instead of running the networks.
func TestBenchDetect(t *testing.T) {
	lfw := func(n string) string {
		return datadir.ForTest(t, "lfw", "images_deepfunneled", "George_W_Bush", "George_W_Bush_"+n+".jpg")
	}
	imgs := []string{lfw("0001"), lfw("0004")}
	cache := filepath.Join(t.TempDir(), "dets.jsonl")
	rep := benchDetectJSON(t, append([]string{"--detections", cache, "--list-missed"}, imgs...)...)
	if rep.Rule != face.DefaultRule() || !strings.Contains(rep.Criterion, "IoU") {
		t.Errorf("rule %+v, criterion %q", rep.Rule, rep.Criterion)
	}
	got := map[string]detectRow{}
	for _, r := range rep.Results {
		if r.Set != "images" || r.Images != 2 || r.Recall != float64(r.Found)/2 || len(r.Missed) != 2-r.Found {
			t.Errorf("row %+v", r)
		}
		got[r.Copy+"/"+r.Detector] = r
	}
	if len(got) != 8 {
		t.Fatalf("rows %v, want colour and grey × ssd, tiny, either, both", got)
	}
	for key, want := range map[string]int{"colour/ssd": 2, "grey/ssd": 0, "colour/both": 2, "grey/both": 2, "grey/either": 2} {
		if got[key].Found != want {
			t.Errorf("%s found %d of 2, want %d", key, got[key].Found, want)
		}
	}
	if m := got["grey/ssd"].Missed; len(m) != 2 || m[0] != "George_W_Bush_0001.jpg" {
		t.Errorf("grey/ssd missed %v", m)
	}
	before, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(before, []byte("\n")); n != 1+2*len(imgs) {
		t.Fatalf("detections file has %d lines, want a header and one per image copy", n)
	}
	// Cut the file as an interrupted run would (half of the last line):
	// the last image is run again and the results are the same.
	cut := before[:len(before)-len(before[bytes.LastIndexByte(before[:len(before)-1], '\n')+1:])/2]
	if err := os.WriteFile(cache, cut, 0o644); err != nil {
		t.Fatal(err)
	}
	again := benchDetectJSON(t, append([]string{"--detections", cache, "--list-missed"}, imgs...)...)
	for i := range rep.Results {
		a, b := rep.Results[i], again.Results[i]
		if a.Found != b.Found || a.Other != b.Other || a.Detector != b.Detector || a.Copy != b.Copy {
			t.Errorf("second run row %+v, first %+v", b, a)
		}
	}
	have, n, err := readDetections(cache)
	if err != nil || len(have) != 2 || have[imgs[1]][1] == nil {
		t.Fatalf("after resuming: %d images, err %v", len(have), err)
	}
	// The cut line is gone and the last image's two copies were appended
	// again (its colour line is now there twice; the later one counts).
	after, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(after)) != n || bytes.Count(after, []byte("\n")) != 2+2*len(imgs) || !bytes.HasPrefix(after, cut[:bytes.LastIndexByte(cut, '\n')+1]) {
		t.Errorf("resumed file of %d lines:\n%.300s", bytes.Count(after, []byte("\n")), after)
	}
	// A detections file of other settings is refused, not mixed in.
	other := filepath.Join(t.TempDir(), "other.jsonl")
	if err := os.WriteFile(other, []byte(`{"header":"veil bench detect v0"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "bench", "detect", "--models", datadir.ModelDirForTest(t), "--detections", other, imgs[0])
	if code == 0 || !strings.Contains(errOut, "other settings") {
		t.Errorf("foreign detections file: exit %d, stderr %q", code, errOut)
	}
}

func TestBenchDetectArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no images"},
		{[]string{"--pairs", "p.txt"}, "need --images"},
		{[]string{"--tune", "x.jpg"}, "--tune needs --train-pairs"},
		{[]string{"--train-every", "0", "x.jpg"}, "--train-every and --test-every must be at least 1"},
		{[]string{"--test-every", "-1", "x.jpg"}, "--train-every and --test-every must be at least 1"},
	} {
		code, _, errOut := run(t, append([]string{"bench", "detect"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// FuzzReadDetections: a detections file is parsed without panicking, and
// whatever it accepts has valid sizes and copies.
func FuzzReadDetections(f *testing.F) {
	f.Add([]byte(`{"header":"` + detectHeader() + `"}` + "\n" + `{"path":"a.jpg","copy":"grey","w":250,"h":250,"ssd":[[1,2,3,4,0.5]]}` + "\n"))
	f.Add([]byte(`{"header":"` + detectHeader() + `"}` + "\n" + `{"path":"a.jpg","copy":"sepia","w":0}`))
	f.Add([]byte("{\"header\""))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "d.jsonl")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		have, n, err := readDetections(p)
		if err != nil {
			return
		}
		if n > int64(len(data)) || (n > 0 && data[n-1] != '\n') {
			t.Fatalf("complete length %d of %d bytes", n, len(data))
		}
		for path, copies := range have {
			for _, d := range copies {
				if d != nil && (d.w <= 0 || d.h <= 0 || d.name != filepath.Base(path)) {
					t.Fatalf("accepted %+v for %q", d, path)
				}
			}
		}
	})
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
	labelled := detectImage{w: 250, h: 250,
		ssd:  []nets.Detection{n(75, 65, 100, 120, 0.04)},
		tiny: []nets.Detection{n(65, 80, 120, 100, 0.35)}}
	corner := detectImage{w: 250, h: 250,
		ssd:  []nets.Detection{n(75, 65, 100, 120, 0.9), n(0, 0, 40, 50, 0.025)},
		tiny: []nets.Detection{n(0, 5, 45, 40, 0.35)}}
	var train [2][]detectImage
	for range 10 {
		train[0] = append(train[0], labelled)
	}
	for range 3 {
		train[1] = append(train[1], corner)
	}
	got := tuneRule(train)
	want := face.Rule{SSD: 0.5, Tiny: 0.5, PairSSD: 0.03, PairTiny: 0.35, PairIoU: 0.6}
	if got.Rule != want || got.Found != 13 || got.Other != 0 || got.Tried != len(tunePairSSD)*len(tunePairTiny)*len(tunePairIoU) {
		t.Fatalf("tuned %+v, want rule %+v finding 13 with no other face", got, want)
	}
	if iou := (face.Box{X: 75, Y: 65, Width: 100, Height: 120}).IoU(face.Box{X: 65, Y: 80, Width: 120, Height: 100}); !(iou > 0.6 && iou < 0.75) {
		t.Fatalf("test geometry: IoU %g", iou)
	}
}

// TestDefaultRuleIsTuned: face.DefaultRule is what bench detect --tune
// chooses on the detections of its training images. The testdata file is
// the --detections file of `veil bench detect --tune --train-every 18` on
// LFW's development training pairs (192 images, colour and grey), pruned
// of boxes no rule of the grid can accept or pair (tiny boxes below 0.1;
// SSD boxes below 0.5 overlapping no remaining tiny box by IoU 0.3), with
// paths relative to the data folder. It fails when the rule, the grid,
// the objective or the networks' weights (the file's header) change
// without re-tuning.
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
	have, _, err := readDetections(path)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(have))
	for p := range have {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var train [2][]detectImage
	for _, p := range paths {
		for c := range train {
			if have[p][c] == nil {
				t.Fatalf("%s has no %s copy", p, detectCopies[c])
			}
			train[c] = append(train[c], *have[p][c])
		}
	}
	if len(paths) != 192 {
		t.Fatalf("%d images, want 192", len(paths))
	}
	got := tuneRule(train)
	// Found and other faces as the full run reported them (before pruning).
	if got.Rule != face.DefaultRule() || got.Found != 364 || got.Other != 23 {
		t.Errorf("tuned %+v (found %d, other %d); DefaultRule is %+v (found 364, other 23 on these images)", got.Rule, got.Found, got.Other, face.DefaultRule())
	}
}
