// Package localtest builds tiny federated training data for the tests of
// packages local and sim: an LFW-style folder with several training
// identities, loaded for veil train's distillation head.
package localtest

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/training"
	"github.com/veil-privacy/veil/training/trainingtest"
)

// writeImage writes a 250×250 JPEG of identity pattern seed with pixel
// noise k.
func writeImage(t testing.TB, path string, seed, k uint64) {
	t.Helper()
	pat := rand.New(rand.NewPCG(seed, 1))
	blocks := make([]color.RGBA, 25)
	for i := range blocks {
		blocks[i] = color.RGBA{uint8(pat.IntN(256)), uint8(pat.IntN(256)), uint8(pat.IntN(256)), 255}
	}
	noise := rand.New(rand.NewPCG(seed, k+10))
	img := image.NewRGBA(image.Rect(0, 0, 250, 250))
	for y := 0; y < 250; y++ {
		for x := 0; x < 250; x++ {
			c := blocks[(y/50)*5+x/50]
			j := func(v uint8) uint8 { return uint8(min(255, max(0, int(v)+noise.IntN(41)-20))) }
			img.Set(x, y, color.RGBA{j(c.R), j(c.G), j(c.B), 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 85}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// WriteLFW lays out an LFW-style folder in dir with people training
// identities (Train_00…, 3 images each), four test identities whose
// pairs fill both pairs files, and centre/ with two public images.
func WriteLFW(t testing.TB, dir string, people int) {
	t.Helper()
	img := func(name string, k int) string {
		return filepath.Join(dir, "images_deepfunneled", name, fmt.Sprintf("%s_%04d.jpg", name, k))
	}
	var list strings.Builder
	fmt.Fprintf(&list, "%d\n", people)
	for p := 0; p < people; p++ {
		name := fmt.Sprintf("Train_%02d", p)
		fmt.Fprintf(&list, "%s\t3\n", name)
		for k := 1; k <= 3; k++ {
			writeImage(t, img(name, k), uint64(100+p), uint64(k))
		}
	}
	test := []string{"Test_A", "Test_B", "Test_C", "Test_D"}
	for i, name := range test {
		for k := 1; k <= 2; k++ {
			writeImage(t, img(name, k), uint64(10+i), uint64(k))
		}
	}
	for k := 1; k <= 2; k++ {
		writeImage(t, filepath.Join(dir, "centre", fmt.Sprintf("c%d.jpg", k)), uint64(500+k), 1)
	}
	pairs := "4\nTest_A\t1\t2\nTest_B\t1\t2\nTest_C\t1\t2\nTest_D\t1\t2\n" +
		"Test_A\t1\tTest_B\t1\nTest_A\t2\tTest_C\t2\nTest_C\t1\tTest_D\t1\nTest_B\t2\tTest_D\t2\n"
	files := map[string]string{"peopleDevTrain.txt": list.String(), "pairsDevTrain.txt": pairs, "pairsDevTest.txt": pairs}
	for f, s := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Options are veil train's options for the distillation head on the
// folder WriteLFW made, with stand-in describers (trainingtest's block
// means: 2048 input values, 128-d teacher descriptors).
func Options(dir string) training.Options {
	return training.Options{
		Model:      training.ModelOptions{Kind: "head", Features: arch.HeadAgeGender, Loss: "distill"},
		Data:       training.DataOptions{Set: "lfw", LFW: dir, MinImages: 1, CentreImages: filepath.Join(dir, "centre"), CentreCount: 2},
		Optim:      training.OptimOptions{Batch: 2, MicroBatch: 4, Optimizer: "adam", LearningRate: 0.01, WeightDecay: 5e-4, Seed: 1},
		Epochs:     1,
		Checkpoint: filepath.Join(dir, "unused.ckpt"),
		Describers: training.Describers{
			Inputs:  func() (eval.Describer, int, error) { return trainingtest.BlockDescriber(2048), 2048, nil },
			Teacher: func() (eval.Describer, error) { return trainingtest.BlockDescriber(128), nil },
		},
		Workers: 1,
	}
}

// Data writes a folder with people training identities into dir and loads
// it as veil train would; it returns the options it loaded with.
func Data(t testing.TB, dir string, people int) (*training.Data, training.Options) {
	t.Helper()
	WriteLFW(t, dir, people)
	o := Options(dir)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := training.LoadData(&o)
	if err != nil {
		t.Fatal(err)
	}
	return d, o
}
