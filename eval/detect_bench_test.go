package eval

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/internal/datadir"
)

func TestNewDetectBenchRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		o    DetectBenchOptions
		want string
	}{
		{"no images", DetectBenchOptions{}, "no images"},
		{"pairs without folder", DetectBenchOptions{Pairs: "p.txt"}, "need --images"},
		{"tune without training", DetectBenchOptions{Images: []string{"x.jpg"}, Tune: true}, "--tune needs --train-pairs"},
		{"train every", DetectBenchOptions{Images: []string{"x.jpg"}, TrainEvery: -1}, "must be at least 1"},
		{"test every", DetectBenchOptions{Images: []string{"x.jpg"}, TestEvery: -1}, "must be at least 1"},
		{"sides every", DetectBenchOptions{Images: []string{"x.jpg"}, SidesEvery: -1}, "the last at least 0"},
		{"missing pairs file", DetectBenchOptions{ImagesDir: dir, Pairs: filepath.Join(dir, "none.txt")}, "cannot read pairs file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewDetectBench(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// The sets of a bench: every n-th image of the training and test pairs'
// images (sorted, without repeats), the side crops of every n-th test
// image, and the report's record of it, before anything runs.
func TestNewDetectBenchSets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	test := write("test.txt", "2\nA 1 2\nB 1 3\nA 1 C 1\nB 2 D 4\n") // A1 A2 B1 B3 C1 B2 D4: 7 images
	train := write("train.txt", "1\nE 1 2\nE 1 F 1\n")               // E1 E2 F1
	for _, tc := range []struct {
		name                  string
		o                     DetectBenchOptions
		train, test, sides    int
		trainEvery, testEvery int
		sidesOf               string
	}{
		{"all", DetectBenchOptions{ImagesDir: dir, Pairs: test, TrainPairs: train}, 3, 7, 0, 1, 1, ""},
		{"every other", DetectBenchOptions{ImagesDir: dir, Pairs: test, TrainPairs: train, TrainEvery: 2, TestEvery: 3}, 2, 3, 0, 2, 3, ""},
		{"sides of test", DetectBenchOptions{ImagesDir: dir, Pairs: test, TestEvery: 2, SidesEvery: 2}, 0, 4, 4, 0, 2, "test"},
		{"sides of images", DetectBenchOptions{Images: []string{"a.jpg", "b.jpg", "c.jpg"}, SidesEvery: 2}, 0, 0, 4, 0, 0, "images"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewDetectBench(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.sets["train"]) != tc.train || len(b.sets["test"]) != tc.test || len(b.sets[SideSet]) != tc.sides {
				t.Errorf("sets: %d train, %d test, %d side crops", len(b.sets["train"]), len(b.sets["test"]), len(b.sets[SideSet]))
			}
			r := b.rep
			if r.TrainEvery != tc.trainEvery || r.TestEvery != tc.testEvery || r.SidesOf != tc.sidesOf || r.SidesEvery != tc.o.SidesEvery {
				t.Errorf("report %+v", r)
			}
		})
	}
}

// A run on one LFW photo and its side crops: a row per set, copy and rule,
// the labelled face found by the default rule in colour, nothing
// labelled found in the side crops.
func TestDetectBenchRun(t *testing.T) {
	img := datadir.ForTest(t, "lfw", "images_deepfunneled", "George_W_Bush", "George_W_Bush_0001.jpg")
	b, err := NewDetectBench(DetectBenchOptions{Images: []string{img}, SidesEvery: 1, ListMissed: true, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := face.NewPipeline(face.Options{ModelDir: datadir.ModelDirForTest(t), Detector: face.Both})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(context.Background(), nil); err == nil {
		t.Fatal("a run without a pipeline")
	}
	rep, err := b.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rule != face.DefaultRule() || rep.Criterion != DetectCriterion || rep.RetryPad != face.RetryPad || rep.Tuned != nil || !(rep.WallS > 0) {
		t.Errorf("report %+v", rep)
	}
	rows := map[string]DetectRow{}
	for _, r := range rep.Results {
		rows[r.Set+"/"+r.Copy+"/"+r.Detector] = r
	}
	if len(rep.Results) != 20 || len(rows) != 20 {
		t.Fatalf("%d rows, want (images, sides) × (colour, grey) × 5 rules", len(rep.Results))
	}
	if r := rows["images/colour/both+retry"]; r.Images != 1 || r.Found != 1 || len(r.Missed) != 0 {
		t.Errorf("colour, default rule: %+v", r)
	}
	if r := rows[SideSet+"/colour/both+retry"]; r.Images != 2 || r.Found != 0 {
		t.Errorf("side crops: %+v", r)
	}
}
