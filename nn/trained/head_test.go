package trained

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// data returns n random inputs of length per (flat) and class labels.
func data(n, per, classes int, seed uint64) ([]float32, []int32) {
	r := rand.New(rand.NewPCG(seed, 2))
	x := make([]float32, n*per)
	l := make([]int32, n)
	for i := range l {
		l[i] = int32(r.IntN(classes))
		for j := 0; j < per; j++ {
			x[i*per+j] = float32(r.NormFloat64()) + float32(l[i])*float32(j%5-2)*0.3
		}
	}
	return x, l
}

// trainHead takes a few optimiser steps on a small head and returns the
// trainer and its checkpoint.
func trainHead(t *testing.T, mc arch.Config, ema float64, microBatch int) (*train.Trainer, *checkpoint.Checkpoint) {
	t.Helper()
	m, err := arch.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	lc := loss.Config{Kind: "cosface", Classes: 3, Scale: 16}.Defaults()
	lh, err := loss.New(m.Params(), lc, m.Config().Embedding)
	if err != nil {
		t.Fatal(err)
	}
	m.Params().Init(3)
	tr, err := train.New(m, lh, train.Options{Optimizer: "adam", LearningRate: 0.02, MicroBatch: microBatch, EMA: ema})
	if err != nil {
		t.Fatal(err)
	}
	x, l := data(24, m.Config().In, 3, 5)
	for range 4 {
		if _, err := tr.Step(x, l); err != nil {
			t.Fatal(err)
		}
	}
	return tr, checkpoint.FromTrainer(checkpoint.Header{Model: m.Config(), Loss: lc, Optimizer: "adam", Epoch: 1}, tr.Params(), tr.State())
}

// rows splits flat inputs into vectors of length per.
func rows(x []float32, per int) [][]float32 {
	var out [][]float32
	for i := 0; i+per <= len(x); i += per {
		out = append(out, x[i:i+per])
	}
	return out
}

// embedTol bounds the difference between two computations of one
// embedding that may sum in another order: the backend picks its matrix
// product kernel (AVX2, AVX-512, blocking) by shape and CPU, so batches of
// other sizes, or another machine, round differently. Embeddings are unit
// vectors, so an absolute bound is a relative one; 1e-5 is about 100
// float32 ulps at 1, while using other weights (the last instead of the
// averaged ones, a wrong layer) moves values by 1e-2 or more.
const embedTol = 1e-5

// maxDiff is the largest absolute difference between a and b.
func maxDiff(t *testing.T, a, b []float32) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("lengths %d and %d", len(a), len(b))
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// TestHeadEmbedsLikeTheTrainer saves a trained head, loads it back and
// checks that its embeddings equal the trainer's own within embedTol, with
// and without a moving average of the weights, for several micro-batch
// sizes and head shapes. Bit-equality is not the claim: the head and the
// trainer run the same weights through matrix products of other shapes,
// which the backend sums in other orders (on AVX-512 machines the "small
// head" case differs in the 7th digit).
func TestHeadEmbedsLikeTheTrainer(t *testing.T) {
	cases := []struct {
		name       string
		mc         arch.Config
		ema        float64
		microBatch int
	}{
		{"descriptor head, last weights", arch.Config{Kind: "head", In: 128}, 0, 8},
		{"descriptor head, EMA", arch.Config{Kind: "head", In: 128}, 0.9, 32},
		{"age/gender head, EMA", arch.Config{Kind: "head", Features: arch.HeadAgeGender}, 0.5, 16},
		{"age/gender head, small micro-batch", arch.Config{Kind: "head", Features: arch.HeadAgeGender}, 0.5, 4},
		{"small head, other sizes", arch.Config{Kind: "head", Features: arch.HeadAgeGender, Hidden: 8, Embedding: 12}, 0.5, 64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, ck := trainHead(t, c.mc, c.ema, c.microBatch)
			path := filepath.Join(t.TempDir(), "head.ckpt")
			if err := ck.Save(path); err != nil {
				t.Fatal(err)
			}
			h, err := LoadHead(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if h.UsesEMA() != (c.ema > 0) {
				t.Errorf("UsesEMA %v with EMA %g", h.UsesEMA(), c.ema)
			}
			wantIn := map[string]string{"": InputDescriptor, arch.HeadAgeGender: InputAgeGender}[c.mc.Features]
			if h.Input() != wantIn || h.InputDim() != ck.Header.Model.In || h.Dim() != ck.Header.Model.Embedding {
				t.Errorf("head reads %s[%d] → %d, checkpoint says %+v", h.Input(), h.InputDim(), h.Dim(), ck.Header.Model)
			}
			// 37 inputs: more than one of the head's batches, a ragged end.
			x, _ := data(37, h.InputDim(), 3, 11)
			want, err := tr.Embed(x, 37)
			if err != nil {
				t.Fatal(err)
			}
			got, err := h.Embed(rows(x, h.InputDim()))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d embeddings, want %d", len(got), len(want))
			}
			for i := range got {
				if len(got[i]) != h.Dim() {
					t.Fatalf("embedding %d has %d values, want %d", i, len(got[i]), h.Dim())
				}
				if d := maxDiff(t, got[i], want[i]); d > embedTol {
					t.Fatalf("embedding %d differs from the trainer's by %.3g (> %g):\n got %v\nwant %v", i, d, embedTol, got[i][:4], want[i][:4])
				}
			}
			// One input alone embeds as it does in a batch.
			one, err := h.Embed(rows(x, h.InputDim())[3:4])
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(t, one[0], got[3]); d > embedTol {
				t.Errorf("an input's embedding depends on the other inputs of the call (differs by %.3g)", d)
			}
		})
	}
}

// TestHeadUsesTheAveragedWeights: with EMA the loaded head must embed with
// the moving average, not the last weights; a head rebuilt from the last
// weights alone embeds differently.
func TestHeadUsesTheAveragedWeights(t *testing.T) {
	tr, ck := trainHead(t, arch.Config{Kind: "head", In: 16, Hidden: 8}, 0.9, 8)
	avg, err := NewHead(ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := *ck
	last.Header.EMA = false
	last.State.EMA = nil
	lastHead, err := NewHead(&last, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := data(4, 16, 3, 2)
	a, err := avg.Embed(rows(x, 16))
	if err != nil {
		t.Fatal(err)
	}
	b, err := lastHead.Embed(rows(x, 16))
	if err != nil {
		t.Fatal(err)
	}
	want, err := tr.Embed(x, 4)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(t, a[0], want[0]); d > embedTol {
		t.Errorf("the averaged weights are not the ones used: %.3g from the trainer's embedding", d)
	}
	// The test is vacuous unless the last weights embed far beyond the
	// tolerance.
	if d := maxDiff(t, b[0], want[0]); d < 100*embedTol {
		t.Errorf("the last weights embed within %.3g of the average: the test cannot tell them apart", d)
	}
}

func TestNewHeadRefusesOtherCheckpoints(t *testing.T) {
	_, good := trainHead(t, arch.Config{Kind: "head", In: 16, Hidden: 8}, 0, 8)
	lf, err := arch.New(arch.Config{Kind: "lightface", Input: 32, Width: 0.25, Norm: "group"})
	if err != nil {
		t.Fatal(err)
	}
	lightface := checkpoint.FromTrainer(checkpoint.Header{Model: lf.Config()}, lf.Params(), zeroState(lf.Params().Len()))
	unknown := *good
	unknown.Header.Model.Features = "iris"
	missing := *good
	missing.Header.Params = missing.Header.Params[1:]
	missing.Values = missing.Values[1:]
	wrongSize := *good
	wrongSize.Header.Model.Hidden = 9
	nan := *good
	nan.Values = slices.Clone(good.Values)
	nan.Values[0] = slices.Clone(good.Values[0])
	nan.Values[0][0] = float32(math.NaN())
	cases := []struct {
		name string
		c    *checkpoint.Checkpoint
		want string
	}{
		{"LightFace", lightface, "holds lightface, not an embedding head"},
		{"unknown features", &unknown, `reads features "iris"`},
		{"missing parameter", &missing, "no parameter"},
		{"wrong shape", &wrongSize, "parameter"},
		{"not finite", &nan, "not finite"},
	}
	for _, c := range cases {
		_, err := NewHead(c.c, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := NewHead(lightface, nil); !errors.Is(err, ErrNotHead) {
		t.Errorf("LightFace checkpoint: %v does not wrap ErrNotHead", err)
	}
	if _, err := LoadHead(filepath.Join(t.TempDir(), "none.ckpt"), nil); err == nil {
		t.Error("missing file accepted")
	}
	h, err := NewHead(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Embed([][]float32{make([]float32, 15)}); err == nil || !strings.Contains(err.Error(), "has 15 values, the head reads 16") {
		t.Errorf("short input: %v", err)
	}
	bad := make([]float32, 16)
	bad[2] = float32(math.Inf(1))
	if _, err := h.Embed([][]float32{bad}); err == nil {
		t.Error("infinite input accepted")
	}
}

func zeroState(n int) train.State {
	return train.State{M: make([][]float32, n)}
}
