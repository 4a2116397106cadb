package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/internal/datadir"
)

func benchDetectJSON(t *testing.T, args ...string) eval.DetectReport {
	t.Helper()
	code, out, errOut := run(t, append([]string{"bench", "detect", "--models", datadir.ModelDirForTest(t), "--json", "-q"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep eval.DetectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return rep
}

// TestBenchDetect measures two LFW photos whose greyscale copies SSD
// misses (face-api's own network scores them 0.050 and 0.040 in grey,
// 0.928 and 0.678 in colour; see face/nets/testdata/faceapi_grey.json):
// the report has a row per copy and detector, SSD finds both faces in
// colour and neither in grey, and the combined rule finds all four, with
// or without the second pass (which does not run: the first finds the
// faces). Each row counts the photos by kind. A second run reads the
// detections file instead of running the networks.
func TestBenchDetect(t *testing.T) {
	lfw := func(n string) string {
		return datadir.ForTest(t, "lfw", "images_deepfunneled", "George_W_Bush", "George_W_Bush_"+n+".jpg")
	}
	imgs := []string{lfw("0001"), lfw("0004")}
	cache := filepath.Join(t.TempDir(), "dets.jsonl")
	rep := benchDetectJSON(t, append([]string{"--detections", cache, "--list-missed"}, imgs...)...)
	if rep.Rule != face.DefaultRule() || !strings.Contains(rep.Criterion, "IoU") || rep.RetryPad != face.RetryPad {
		t.Errorf("rule %+v, criterion %q", rep.Rule, rep.Criterion)
	}
	got := map[string]eval.DetectRow{}
	for _, r := range rep.Results {
		if r.Set != "images" || r.Images != 2 || r.Recall != float64(r.Found)/2 || len(r.Missed) != 2-r.Found {
			t.Errorf("row %+v", r)
		}
		kinds := 0
		for _, k := range r.ByKind {
			kinds += k.Images
		}
		if kinds < 2 {
			t.Errorf("row %+v counts %d photos by kind, want each of the 2 at least once", r, kinds)
		}
		got[r.Copy+"/"+r.Detector] = r
	}
	if len(got) != 10 {
		t.Fatalf("rows %v, want colour and grey × ssd, tiny, either, both, both+retry", got)
	}
	for key, want := range map[string]int{"colour/ssd": 2, "grey/ssd": 0, "colour/both": 2, "grey/both": 2, "grey/either": 2, "grey/both+retry": 2} {
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
	have, n, err := eval.ReadDetections(cache)
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
	// Side crops: the left and right quarters of the first image, run on
	// top of the same file; nothing there is the labelled face.
	sides := benchDetectJSON(t, append([]string{"--detections", cache, "--sides-every", "2"}, imgs...)...)
	nSides := 0
	for _, r := range sides.Results {
		if r.Set == eval.SideSet {
			nSides++
			if r.Images != 2 || r.Found != 0 || len(r.ByKind) != 1 || r.ByKind[0].Kind != eval.SideSet {
				t.Errorf("side-crop row %+v", r)
			}
		}
	}
	if nSides != 10 || sides.SidesOf != "images" || sides.SidesEvery != 2 {
		t.Errorf("%d side-crop rows (want 10) of %q every %d", nSides, sides.SidesOf, sides.SidesEvery)
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
		{[]string{"--sides-every", "-1", "x.jpg"}, "--sides-every at least 0"},
	} {
		code, _, errOut := run(t, append([]string{"bench", "detect"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}
