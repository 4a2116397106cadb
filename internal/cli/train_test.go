package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
)

func TestTrainRefusesBadConfigurations(t *testing.T) {
	other := filepath.Join(t.TempDir(), "head.ckpt")
	m, err := arch.New(arch.Config{Kind: "head"})
	if err != nil {
		t.Fatal(err)
	}
	st := train.State{}
	for i := 0; i < m.Params().Len(); i++ {
		st.M = append(st.M, make([]float32, m.Params().Spec(i).Size()))
	}
	if err := checkpoint.FromTrainer(checkpoint.Header{Model: m.Config()}, m.Params(), st).Save(other); err != nil {
		t.Fatal(err)
	}
	// A LightFace checkpoint trained on private data (the DP defaults).
	private := filepath.Join(t.TempDir(), "private.ckpt")
	lf, err := arch.New(arch.Config{Kind: "lightface", Input: 64, Width: 0.25, Norm: "group"})
	if err != nil {
		t.Fatal(err)
	}
	lst := train.State{}
	for i := 0; i < lf.Params().Len(); i++ {
		lst.M = append(lst.M, make([]float32, lf.Params().Spec(i).Size()))
	}
	if err := checkpoint.FromTrainer(checkpoint.Header{Model: lf.Config(), Data: "lfw"}, lf.Params(), lst).Save(private); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"train", "--train-set", "mtfl"}, "needs --loss distill"},
		{[]string{"train", "--train-set", "mtfl", "--loss", "distill", "--min-images", "2"}, "does not apply to --train-set mtfl"},
		{[]string{"train", "--train-set", "celeba"}, "unknown --train-set"},
		{[]string{"train", "--init", private, "--resume", private}, "not both"},
		{[]string{"train", "--freeze-blocks", "15"}, "--freeze-blocks must be in [0, 14]"},
		{[]string{"train", "--model", "head", "--freeze-blocks", "2"}, "--freeze-blocks applies to LightFace"},
		{[]string{"train", "--max-people", "2", "--init", other}, "another model"},
		{[]string{"train", "--max-people", "2", "--dp", "--noise-multiplier", "1", "--init", private}, "trained on private data"},
		{[]string{"train", "--dp", "--norm", "batch", "--noise-multiplier", "1"}, "batch normalisation"},
		{[]string{"train", "--dp", "--sampling-rate", "1.5", "--noise-multiplier", "1"}, "(0, 1]"},
		{[]string{"train", "--dp", "--sampling-rate", "0", "--noise-multiplier", "1"}, "(0, 1]"},
		{[]string{"train", "--dp", "--loss", "triplet", "--noise-multiplier", "1"}, "triplet"},
		{[]string{"train", "--dp"}, "exactly one of"},
		{[]string{"train", "--noise-multiplier", "1"}, "needs --dp"},
		{[]string{"train", "--model", "resnet"}, "unknown --model"},
		{[]string{"train", "--ema", "1"}, "--ema must be in [0, 1)"},
		{[]string{"train", "--model", "head", "--loss", "distill"}, "use --features agegender"},
		{[]string{"train", "--model", "head", "--features", "pixels"}, "unknown --features"},
		{[]string{"train", "--features", "agegender"}, "LightFace reads images"},
		{[]string{"train", "--loss", "distill", "--max-people", "2", "--centre-count", "0"}, "--centre-count must be positive"},
		{[]string{"train", "--loss", "distill", "--max-people", "2", "--centre-images", t.TempDir()}, "no JPEG or PNG images"},
		{[]string{"train", "--min-images", "100000"}, "empty training split"},
		{[]string{"train", "--resume", "testdata/does-not-exist.ckpt"}, "no such file"},
		{[]string{"train", "--resume", other}, "another model"},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := Main(tc.args, strings.NewReader(""), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want failure mentioning %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

func TestPairAccuracy(t *testing.T) {
	lfw := dataset.LFW{Dir: "d"}
	vecs := map[string][]float32{
		lfw.ImagePath("A", 1): {1, 0}, lfw.ImagePath("A", 2): {0.9, 0.1},
		lfw.ImagePath("B", 1): {0, 1}, lfw.ImagePath("B", 2): {0.1, 0.9},
	}
	pairs := []dataset.Pair{{NameA: "A", A: 1, NameB: "A", B: 2, Same: true}, {NameA: "B", A: 1, NameB: "B", B: 2, Same: true}, {NameA: "A", A: 1, NameB: "B", B: 1, Same: false}, {NameA: "A", A: 2, NameB: "B", B: 2, Same: false}}
	acc, thr, err := pairAccuracy(vecs, lfw, pairs, pairs)
	if err != nil || acc != 1 || !(thr > 0.2 && thr < 0.99) {
		t.Errorf("pairAccuracy = %v, %v, %v; want 1 with a threshold between the classes", acc, thr, err)
	}
	if _, _, err := pairAccuracy(vecs, lfw, pairs, []dataset.Pair{{NameA: "C", A: 1, NameB: "A", B: 1, Same: false}}); err == nil || !strings.Contains(err.Error(), "no vector") {
		t.Errorf("missing image: err = %v", err)
	}
}
