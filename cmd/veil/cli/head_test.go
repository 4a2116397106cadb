package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/nn/trained"
)

// headPairs are real LFW development pairs (name, number, name, number):
// the first four matched and four mismatched pairs of the file.
func headPairs(t *testing.T, file string) [][4]string {
	t.Helper()
	pf, err := dataset.ReadPairsFile(datadir.ForTest(t, "lfw", file))
	if err != nil {
		t.Fatal(err)
	}
	var out [][4]string
	same, diff := 0, 0
	for _, p := range pf.Pairs {
		if (p.Same && same < 4) || (!p.Same && diff < 4) {
			out = append(out, [4]string{p.Name1, fmt.Sprint(p.Num1), p.Name2, fmt.Sprint(p.Num2)})
			if p.Same {
				same++
			} else {
				diff++
			}
		}
	}
	return out
}

// writeMixedLFW lays out writeTinyLFW's synthetic training identities with
// pairs files of real LFW development pairs, whose people's folders link
// to the shared data: veil train learns on the synthetic images and scores
// the real pairs, as veil verify --head then does.
func writeMixedLFW(t *testing.T, dir string) {
	t.Helper()
	writeTinyLFW(t, dir)
	real := datadir.ForTest(t, "lfw", "images_deepfunneled")
	for _, f := range []string{"pairsDevTrain.txt", "pairsDevTest.txt"} {
		var b strings.Builder
		b.WriteString("4\n")
		for _, p := range headPairs(t, f) {
			if p[0] == p[2] {
				fmt.Fprintf(&b, "%s\t%s\t%s\n", p[0], p[1], p[3])
			} else {
				fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", p[0], p[1], p[2], p[3])
			}
			for _, name := range []string{p[0], p[2]} {
				link := filepath.Join(dir, "images_deepfunneled", name)
				if _, err := os.Lstat(link); err == nil {
					continue
				}
				if err := os.Symlink(filepath.Join(real, name), link); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// trainerFrom rebuilds the trainer a checkpoint was saved from (weights,
// optimiser state and moving average): the reference embeddings.
func trainerFrom(t *testing.T, path string) *train.Trainer {
	t.Helper()
	ck, err := checkpoint.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := arch.New(ck.Header.Model)
	if err != nil {
		t.Fatal(err)
	}
	h, err := loss.New(m.Params(), ck.Header.Loss, m.Config().Embedding)
	if err != nil {
		t.Fatal(err)
	}
	// At least 8 rows per batch: veil train's micro-batch above, and the
	// size from which the backend's products sum in one order
	// (trained.Head's batch).
	o := train.Options{Optimizer: ck.Header.Optimizer, LearningRate: 1e-3, MicroBatch: 8}
	if ck.Header.EMA {
		o.EMA = 0.9
	}
	tr, err := train.New(m, h, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := ck.Apply(m.Config(), tr.Params()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Restore(ck.State); err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTrainedHeadIsUsable trains small heads (on descriptors, and on
// age/gender region features) for a few steps and uses their checkpoints:
// veil verify --head scores the development pairs exactly as the training
// report did; veil embed --head gives each face the trainer's own
// embedding of its input; veil compare --head uses the head's threshold.
func TestTrainedHeadIsUsable(t *testing.T) {
	models := datadir.ModelDirForTest(t)
	data, cache := t.TempDir(), t.TempDir()
	writeMixedLFW(t, data)
	images := filepath.Join(data, "images_deepfunneled")
	photos := []string{lfwPhoto(t, "Abdullah_Gul", 13), lfwPhoto(t, "Abdullah_Gul", 14)}
	for _, features := range []string{"descriptor", arch.HeadAgeGender} {
		t.Run(features, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "head.ckpt")
			rep := trainJSON(t, []string{"train", "--model", "head", "--features", features, "--data", data, "--cache", cache, "--models", models,
				"--min-images", "1", "--epochs", "2", "--batch", "4", "--micro-batch", "8", "--loss", "cosface", "--ema", "0.9",
				"--checkpoint", ckpt, "--json", "-q"})

			// verify --head: the training report's accuracy and threshold.
			code, stdout, stderr := run(t, "verify", "--head", ckpt, "--models", models, "--cache", cache, "--images", images,
				"--pairs", filepath.Join(data, "pairsDevTest.txt"), "--train-pairs", filepath.Join(data, "pairsDevTrain.txt"), "--json", "-q")
			if code != 0 {
				t.Fatalf("verify --head: exit %d: %s", code, stderr)
			}
			var v struct {
				eval.VerifyResult
				Head *headInfo `json:"head"`
			}
			if err := json.Unmarshal([]byte(stdout), &v); err != nil {
				t.Fatal(err)
			}
			if v.Accuracy != rep.DevAccuracy || v.Threshold != 1-rep.Threshold || v.Metric != eval.CosineDistance || v.Pairs != 8 || v.TrainPairs != 8 {
				t.Errorf("verify --head: accuracy %v at cosine distance %v (%s, %d/%d pairs); the training report says %v at similarity %v",
					v.Accuracy, v.Threshold, v.Metric, v.Pairs, v.TrainPairs, rep.DevAccuracy, rep.Threshold)
			}
			if v.Head == nil || v.Head.Dim != rep.Model.Embedding || !v.Head.EMA || v.Head.Input != features {
				t.Errorf("verify --head: head %+v", v.Head)
			}
			// --report writes the same results as JSON while the terminal
			// gets text (the main job's out/verify.json).
			reportPath := filepath.Join(t.TempDir(), "verify.json")
			code, stdout, stderr = run(t, "verify", "--head", ckpt, "--models", models, "--cache", cache, "--images", images,
				"--pairs", filepath.Join(data, "pairsDevTest.txt"), "--train-pairs", filepath.Join(data, "pairsDevTrain.txt"), "-q", "--report", reportPath)
			if code != 0 {
				t.Fatalf("verify --report: exit %d: %s", code, stderr)
			}
			var vr struct {
				eval.VerifyResult
				WallS *float64 `json:"wall_s"`
			}
			if b, err := os.ReadFile(reportPath); err != nil {
				t.Fatal(err)
			} else if err := json.Unmarshal(b, &vr); err != nil {
				t.Fatalf("verify --report wrote %q: %v", b, err)
			}
			if vr.Accuracy != v.Accuracy || vr.Threshold != v.Threshold || vr.WallS == nil || strings.HasPrefix(strings.TrimSpace(stdout), "{") {
				t.Errorf("verify --report: accuracy %v at %v, wall_s %v, terminal %q; --json gave %v at %v", vr.Accuracy, vr.Threshold, vr.WallS, stdout, v.Accuracy, v.Threshold)
			}

			// embed --head: the trainer's own embedding of each face's input.
			d := embedJSON(t, "--head", ckpt, "--models", models, "--detector", "tiny", photos[0], photos[1])
			if d.Head == nil || d.Head.Input != features || d.Head.Dim != rep.Model.Embedding {
				t.Fatalf("embed --head: head %+v", d.Head)
			}
			plain := embedJSON(t, "--models", models, "--detector", "tiny", photos[0], photos[1])
			tr := trainerFrom(t, ckpt)
			var ag *nets.AgeGender
			if features == arch.HeadAgeGender {
				// The networks run on an engine made as the command makes
				// its own (the backend of VEIL_BACKEND, default
				// parallelism).
				eng, err := engine.New(engine.Options{Backend: os.Getenv(engine.EnvBackend)})
				if err != nil {
					t.Fatal(err)
				}
				if ag, err = nets.NewAgeGenderOn(models, eng); err != nil {
					t.Fatal(err)
				}
			}
			for i, im := range d.Images {
				if len(im.Faces) == 0 || len(im.Faces) != len(plain.Images[i].Faces) {
					t.Fatalf("%s: %d faces with the head, %d without", im.Path, len(im.Faces), len(plain.Images[i].Faces))
				}
				img, _, err := imaging.DecodeFile(im.Path, imaging.DefaultLimits())
				if err != nil {
					t.Fatal(err)
				}
				for k, f := range im.Faces {
					if len(f.Embedding) != rep.Model.Embedding || f.Descriptor != nil {
						t.Fatalf("%s face %d: %d-value embedding (descriptor %v), want %d", im.Path, k, len(f.Embedding), f.Descriptor != nil, rep.Model.Embedding)
					}
					input := plain.Images[i].Faces[k].Descriptor
					if ag != nil {
						var l face.Landmarks
						copy(l[:], f.Landmarks)
						crop, err := face.RegionCrop(img, &l)
						if err != nil {
							t.Fatal(err)
						}
						feats, err := ag.RegionFeatures([]*imaging.Float{nets.AgeGenderInput(crop)})
						if err != nil {
							t.Fatal(err)
						}
						input = feats[0]
					}
					want, err := tr.Embed(input, 1)
					if err != nil {
						t.Fatal(err)
					}
					for j := range want[0] {
						if f.Embedding[j] != want[0][j] {
							t.Fatalf("%s face %d: embedding[%d] = %v, the trainer's is %v", im.Path, k, j, f.Embedding[j], want[0][j])
						}
					}
				}
			}

			// compare --head: cosine distance of the largest faces'
			// embeddings, at the threshold verify --head chose.
			r := compareJSON(t, "compare", "--head", ckpt, "--models", models, "--detector", "tiny", "--cache", cache, "--lfw", data, photos[0], photos[1])
			wantDist, err := eval.CosineDistance.Distance(largestDescriptor(t, d, 0), largestDescriptor(t, d, 1))
			if err != nil {
				t.Fatal(err)
			}
			if r.Metric != eval.CosineDistance || r.Threshold != v.Threshold || r.Distance != wantDist || r.Same != (wantDist <= v.Threshold) ||
				r.Head == nil || r.Vectors != "head embedding" || r.SameRight == nil || *r.SameRight != v.SameRight {
				t.Errorf("compare --head: %+v; want cosine distance %v, threshold %v", r, wantDist, v.Threshold)
			}
		})
	}
}

// TestHeadRefusesBadCheckpoints: a file that is not a checkpoint, and a
// LightFace checkpoint, are clear errors in every command taking --head.
func TestHeadRefusesBadCheckpoints(t *testing.T) {
	models := datadir.ModelDirForTest(t)
	dir := t.TempDir()
	garbage := writeFile(t, dir, "garbage.ckpt", []byte("VEILCKPT? not really"))
	lf, err := arch.New(arch.Config{Kind: "lightface", Input: 32, Width: 0.25, Norm: "group"})
	if err != nil {
		t.Fatal(err)
	}
	st := train.State{}
	for i := 0; i < lf.Params().Len(); i++ {
		st.M = append(st.M, make([]float32, lf.Params().Spec(i).Size()))
	}
	lightface := filepath.Join(dir, "lightface.ckpt")
	if err := checkpoint.FromTrainer(checkpoint.Header{Model: lf.Config(), Optimizer: "sgd"}, lf.Params(), st).Save(lightface); err != nil {
		t.Fatal(err)
	}
	photo := lfwPhoto(t, "Abdullah_Gul", 13)
	lfw := datadir.ForTest(t, "lfw")
	for _, c := range []struct {
		ckpt string
		want string
	}{
		{garbage, "not a Veil checkpoint"},
		{lightface, "holds lightface, " + trained.ErrNotHead.Error()},
		{filepath.Join(dir, "none.ckpt"), "none.ckpt"},
	} {
		for _, args := range [][]string{
			{"embed", "--head", c.ckpt, photo},
			{"compare", "--head", c.ckpt, photo, photo},
			{"verify", "--head", c.ckpt, "--images", filepath.Join(lfw, "images_deepfunneled"), "--pairs", filepath.Join(lfw, "pairsDevTest.txt"),
				"--train-pairs", filepath.Join(lfw, "pairsDevTrain.txt")},
		} {
			code, stdout, stderr := run(t, append(args, "--models", models, "-q")...)
			if code != 1 || !strings.Contains(stderr, "--head") || !strings.Contains(stderr, c.want) || stdout != "" {
				t.Errorf("%v: exit %d, stderr %q; want exit 1 and an error about --head mentioning %q", args, code, stderr, c.want)
			}
		}
	}
}
