package eval

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/internal/datadir"
)

// TestRunDetectCompletesFirstVersionFiles: a detections file of the first
// version (no second pass, no kinds) is completed, not run again from
// scratch: an image whose cached first pass has a face keeps its cached
// detections (made up here, so a new run would differ) and gains its
// kinds; an image whose cached first pass has none is run again, with the
// second pass where the rule finds nothing. The completed lines are
// appended, and a second run reads everything from the file.
func TestRunDetectCompletesFirstVersionFiles(t *testing.T) {
	lfw := func(n string) string {
		return datadir.ForTest(t, "lfw", "images_deepfunneled", "Jelena_Dokic", "Jelena_Dokic_"+n+".jpg")
	}
	withFace, noFace := lfw("0001"), lfw("0003")
	made := [][5]float64{{70, 60, 110, 125, 0.97}}
	cache := filepath.Join(t.TempDir(), "v1.jsonl")
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, l := range []detectLine{
		{Header: detectHeaderV1()},
		{Path: withFace, Copy: "colour", W: 250, H: 250, SSD: made},
		{Path: withFace, Copy: "grey", W: 250, H: 250, SSD: made},
		{Path: noFace, Copy: "colour", W: 250, H: 250},
		{Path: noFace, Copy: "grey", W: 250, H: 250},
	} {
		if err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cache, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := face.NewPipeline(face.Options{ModelDir: datadir.ModelDirForTest(t)})
	if err != nil {
		t.Fatal(err)
	}
	opt := DetectRunOptions{Pipeline: p, Sets: map[string][]string{"images": {withFace, noFace}}, Cache: cache, Workers: 2}
	ran := -1
	opt.Progress = func(done, total int) {
		if done == 0 {
			ran = total
		}
	}
	out, err := RunDetect(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if ran != 2 {
		t.Errorf("%d images to complete, want 2", ran)
	}
	for c := range DetectCopies {
		kept := out["images"][c][0]
		if len(kept.Det.SSD) != 1 || kept.Det.SSD[0].Score != 0.97 || len(kept.Det.Tiny) != 0 || len(kept.Kinds) == 0 || kept.Det.Retry != nil {
			t.Errorf("%s copy of the image with a face: %+v, want the cached detections with kinds", DetectCopies[c], kept)
		}
		rerun := out["images"][c][1]
		if len(rerun.Det.Tiny) == 0 || rerun.pass2 == "" || len(rerun.Kinds) == 0 {
			t.Errorf("%s copy of the image without a face: %+v, want it run again with kinds", DetectCopies[c], rerun)
		}
	}
	// Jelena_Dokic_0003 in colour is found on the second pass.
	if found, _ := ScoreFaces(face.DefaultRule().Faces(&out["images"][0][1].Det), 250, 250); !found {
		t.Errorf("Jelena_Dokic_0003 not found with the second pass: %+v", out["images"][0][1].Det)
	}
	opt.Progress = func(done, total int) {
		if done == 0 {
			ran = total
		}
	}
	if _, err := RunDetect(context.Background(), opt); err != nil || ran != 0 {
		t.Errorf("second run: %d images to run, %v; want none", ran, err)
	}
}

// TestRunDetectOptions: a run needs the pipeline whose rule and second
// pass the detections file's header names.
func TestRunDetectOptions(t *testing.T) {
	p, err := face.NewPipeline(face.Options{ModelDir: datadir.ModelDirForTest(t), SinglePass: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []DetectRunOptions{{}, {Pipeline: p}} {
		if _, err := RunDetect(context.Background(), opt); err == nil {
			t.Errorf("options %+v accepted", opt)
		}
	}
}
