// Package trainingtest lays out tiny LFW- and MTFL-style data folders for
// the tests of package training and of veil train.
package trainingtest

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
	"github.com/veil-privacy/veil/imaging"
)

// People are the identities WriteLFW lays out and their numbers of
// images: Train_A and Train_B train, Test_C and Test_D make the pairs.
var People = map[string]int{"Train_A": 3, "Train_B": 3, "Test_C": 2, "Test_D": 2}

// WriteLFW lays out an LFW-style folder: identities Train_A and Train_B
// (3 images each) in peopleDevTrain.txt, and pairs of Test_C and Test_D
// (2 images each) in both pairs files. Each identity is a fixed pattern
// of 5×5 coloured blocks; its images differ by pixel noise.
func WriteLFW(t testing.TB, dir string) {
	t.Helper()
	seed := uint64(0)
	for _, name := range []string{"Train_A", "Train_B", "Test_C", "Test_D"} {
		n := People[name]
		seed++
		pat := rand.New(rand.NewPCG(seed, 1))
		blocks := make([]color.RGBA, 25)
		for i := range blocks {
			blocks[i] = color.RGBA{uint8(pat.IntN(256)), uint8(pat.IntN(256)), uint8(pat.IntN(256)), 255}
		}
		if err := os.MkdirAll(filepath.Join(dir, "images_deepfunneled", name), 0o755); err != nil {
			t.Fatal(err)
		}
		for k := 1; k <= n; k++ {
			noise := rand.New(rand.NewPCG(seed, uint64(k)+10))
			img := image.NewRGBA(image.Rect(0, 0, 250, 250))
			for y := 0; y < 250; y++ {
				for x := 0; x < 250; x++ {
					c := blocks[(y/50)*5+x/50]
					j := func(v uint8) uint8 { return uint8(min(255, max(0, int(v)+noise.IntN(21)-10))) }
					img.Set(x, y, color.RGBA{j(c.R), j(c.G), j(c.B), 255})
				}
			}
			var buf bytes.Buffer
			if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "images_deepfunneled", name, fmt.Sprintf("%s_%04d.jpg", name, k)), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files := map[string]string{
		"peopleDevTrain.txt": "2\nTrain_A\t3\nTrain_B\t3\n",
		"pairsDevTrain.txt":  "2\nTest_C\t1\t2\nTest_D\t1\t2\nTest_C\t1\tTest_D\t1\nTest_C\t2\tTest_D\t2\n",
		"pairsDevTest.txt":   "1\nTest_C\t1\t2\nTest_C\t2\tTest_D\t1\n",
	}
	for f, s := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// WriteMTFL copies three of MTFL's net_7876 faces from src (an MTFL
// folder) and their list lines into dir, with an lfw_5590 line that must
// be left out.
func WriteMTFL(t testing.TB, src, dir string) {
	t.Helper()
	list, err := os.ReadFile(filepath.Join(src, "new_training.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(string(list), "\n") {
		if strings.HasPrefix(l, "lfw_5590/") && len(keep) == 0 {
			keep = append(keep, l)
		}
		if strings.HasPrefix(l, "net_7876/") && len(keep) < 4 && len(keep) > 0 {
			keep = append(keep, l)
			name := strings.Fields(l)[0]
			b, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "net_7876"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "new_training.txt"), []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// BlockDescriber is a stand-in for the face pipeline: the mean colour of
// each of an image's 5×5 blocks (75 values, the pattern WriteLFW draws),
// centred and repeated to dim values. Images of one WriteLFW identity get
// nearly the same vector, different identities different ones. It reads
// the file, so a missing image is an error as with the real describer.
func BlockDescriber(dim int) eval.Describer {
	return func(path string) (eval.Described, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return eval.Described{}, err
		}
		img, _, err := imaging.Decode(b, imaging.DefaultLimits())
		if err != nil {
			return eval.Described{}, err
		}
		var means [75]float64
		bw, bh := max(img.W/5, 1), max(img.H/5, 1)
		for y := 0; y < img.H; y++ {
			for x := 0; x < img.W; x++ {
				k := min(y/bh, 4)*5 + min(x/bw, 4)
				for c := 0; c < 3; c++ {
					means[3*k+c] += float64(img.Pix[3*(y*img.W+x)+c])
				}
			}
		}
		v := make([]float32, dim)
		for i := range v {
			v[i] = float32(means[i%75]/float64(bw*bh)/255 - 0.5)
		}
		return eval.Described{Descriptor: v}, nil
	}
}
