package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/training"
	"github.com/veil-privacy/veil/training/trainingtest"
)

// writeTinyLFW lays out the tiny LFW folder of package trainingtest.
func writeTinyLFW(t *testing.T, dir string) { trainingtest.WriteLFW(t, dir) }

// trainJSON runs veil with args, which must succeed, and decodes its
// --json training report.
func trainJSON(t *testing.T, args []string) training.Report {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	var r training.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	return r
}

func countCacheEntries(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".vdc") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTrainHeadOnTinyData(t *testing.T) {
	isolateLedgers(t)
	data, cache := t.TempDir(), t.TempDir()
	writeTinyLFW(t, data)
	ckpt := filepath.Join(t.TempDir(), "head.ckpt")
	run := func(extra ...string) training.Report {
		t.Helper()
		return trainJSON(t, append([]string{"train", "--model", "head", "--data", data, "--cache", cache, "--min-images", "1",
			"--epochs", "2", "--batch", "4", "--micro-batch", "4", "--loss", "cosface", "--checkpoint", ckpt, "--json", "-q"}, extra...))
	}
	r := run()
	if r.Model.Kind != "head" || r.Images != 6 || r.Identities != 2 || r.Steps != 4 || r.DP {
		t.Errorf("report %+v: want head on 6 images of 2 identities, 4 steps, no DP", r)
	}
	if len(r.LossCurve) != 2 || math.IsNaN(r.FinalLoss) || r.FinalLoss < 0 {
		t.Errorf("loss curve %v", r.LossCurve)
	}
	if r.DevAccuracy < 0 || r.DevAccuracy > 1 || r.DescriptorAccuracy == nil || *r.DescriptorAccuracy < 0 || *r.DescriptorAccuracy > 1 {
		t.Errorf("accuracies %v, %v", r.DevAccuracy, r.DescriptorAccuracy)
	}
	if r.InitAccuracy == nil || *r.InitAccuracy < 0 || *r.InitAccuracy > 1 || r.EMA != 0 {
		t.Errorf("initial accuracy %v, EMA %v: want an accuracy and no EMA", r.InitAccuracy, r.EMA)
	}
	// 6 training and 4 pair images, each described once.
	if n := countCacheEntries(t, cache); n != 10 {
		t.Fatalf("cache holds %d descriptors, want 10", n)
	}
	// DP reuses the cached descriptors and spends privacy, per the unit asked.
	d := run("--dp", "--noise-multiplier", "1", "--sampling-rate", "0.5", "--ema", "0.9", "--privacy-unit", "example")
	if !d.DP || d.Epsilon == nil || !(*d.Epsilon > 0) || d.PrivacyUnit != "example" || d.PrivacyUnits != 6 || d.NoiseMult != 1 || d.Steps != 4 || d.EMA != 0.9 {
		t.Errorf("DP report %+v", d)
	}
	if want := filepath.Join(os.Getenv(dp.EnvLedgers), "lfw.example.ledger"); d.Ledger != want {
		t.Errorf("ledger %q, want the data set's %s", d.Ledger, want)
	}
	if d.DescriptorAccuracy == nil || *d.DescriptorAccuracy != *r.DescriptorAccuracy {
		t.Errorf("raw descriptor accuracy changed between runs sharing the cache: %v vs %v", d.DescriptorAccuracy, r.DescriptorAccuracy)
	}
	// veil verify finds every pair image in the cache train filled.
	var out, errb bytes.Buffer
	if code := Main([]string{"verify", "--images", filepath.Join(data, "images_deepfunneled"), "--pairs", filepath.Join(data, "pairsDevTest.txt"),
		"--train-pairs", filepath.Join(data, "pairsDevTrain.txt"), "--cache", cache, "--json", "-q"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("verify: exit %d: %s", code, errb.String())
	}
	if n := countCacheEntries(t, cache); n != 10 {
		t.Errorf("after veil verify the cache holds %d descriptors, want the same 10 (settings differ?)", n)
	}
}

func TestTrainHeadRefusesNorm(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"train", "--model", "head", "--norm", "group"}, strings.NewReader(""), &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "no normalisation") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// TestTrainHeadOnAgeGenderFeatures trains the head on the age/gender
// network's region features by distillation under DP, then with CosFace
// without DP from the same caches.
func TestTrainHeadOnAgeGenderFeatures(t *testing.T) {
	isolateLedgers(t)
	data, cache := t.TempDir(), t.TempDir()
	writeTinyLFW(t, data)
	ckpt := filepath.Join(t.TempDir(), "head.ckpt")
	run := func(extra ...string) training.Report {
		t.Helper()
		return trainJSON(t, append([]string{"train", "--model", "head", "--features", "agegender", "--data", data, "--cache", cache,
			"--min-images", "1", "--epochs", "2", "--batch", "4", "--micro-batch", "4", "--checkpoint", ckpt, "--json", "-q"}, extra...))
	}
	d := run("--loss", "distill", "--dp", "--noise-multiplier", "1", "--sampling-rate", "0.5",
		"--centre-images", filepath.Join(data, "images_deepfunneled", "Test_C"))
	if d.Model.Features != arch.HeadAgeGender || d.Model.In != 2048 || d.Images != 6 || !d.DP || d.Epsilon == nil || d.PrivacyUnit != "identity" || d.Steps != 4 {
		t.Errorf("report %+v: want a DP head on 2048 age/gender features of 6 images, 4 steps", d)
	}
	// fc1 2048×256 + 256, PReLU 256, fc2 256×128 + 128, distillation centre 128.
	if want := 2048*256 + 256 + 256 + 256*128 + 128 + 128; d.Trainable != want {
		t.Errorf("%d trainable parameters, want %d", d.Trainable, want)
	}
	if d.DescriptorAccuracy == nil || d.InitAccuracy == nil || math.IsNaN(d.FinalLoss) {
		t.Errorf("raw-feature accuracy %v, initial accuracy %v, final loss %v", d.DescriptorAccuracy, d.InitAccuracy, d.FinalLoss)
	}
	// Age/gender features of the 6 training and 4 pair images, plus teacher
	// descriptors of the 6 training and the 2 centre images: separate
	// settings, so separate entries.
	if n := countCacheEntries(t, cache); n != 18 {
		t.Fatalf("cache holds %d entries, want 18", n)
	}
	c := run("--loss", "cosface")
	if c.DP || c.Model.Features != arch.HeadAgeGender || c.Trainable != 2048*256+256+256+256*128+128+128*2 {
		t.Errorf("CosFace report %+v (CosFace on 2 identities adds a 128×2 classifier instead of the centre)", c)
	}
	if *c.DescriptorAccuracy != *d.DescriptorAccuracy {
		t.Errorf("raw-feature accuracy changed between runs sharing the cache: %v vs %v", *c.DescriptorAccuracy, *d.DescriptorAccuracy)
	}
	if n := countCacheEntries(t, cache); n != 18 {
		t.Errorf("after a second run the cache holds %d entries, want the same 18", n)
	}
	// A descriptor head's checkpoint is another model. (Run from a
	// temporary folder: without --checkpoint the command makes out/ in the
	// current one, which was the package's source folder.)
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	code := Main([]string{"train", "--model", "head", "--data", data, "--cache", cache, "--min-images", "1", "--epochs", "1",
		"--loss", "cosface", "--resume", ckpt, "-q"}, strings.NewReader(""), &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "another model") {
		t.Errorf("resuming an age/gender head as a descriptor head: exit %d, %q", code, errb.String())
	}
}
