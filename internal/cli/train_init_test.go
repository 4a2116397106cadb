package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
)

// writeTinyMTFL copies three of MTFL's net_7876 faces and their list lines
// into dir, with an lfw_5590 line that must be left out.
func writeTinyMTFL(t *testing.T, dir string) {
	t.Helper()
	src := datadir.ForTest(t, "mtfl")
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

// TestPublicPretrainingThenDPFineTuning runs the protocol of --train-set
// mtfl, --init and --freeze-blocks on tiny data: the public run's
// checkpoint is marked public, the DP run starts from its weights, keeps
// the frozen blocks exactly and is marked private.
func TestPublicPretrainingThenDPFineTuning(t *testing.T) {
	data, mtfl, cache, dir := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	writeTinyLFW(t, data)
	writeTinyMTFL(t, mtfl)
	run := func(ckpt string, extra ...string) trainReport {
		t.Helper()
		return trainJSON(t, append([]string{"train", "--data", data, "--mtfl", mtfl, "--cache", cache, "--centre-images", filepath.Join(mtfl, "net_7876"),
			"--loss", "distill", "--input", "32", "--norm", "group", "--epochs", "1", "--batch", "4", "--micro-batch", "4",
			"--checkpoint", ckpt, "--json", "-q"}, extra...))
	}
	pub := filepath.Join(dir, "public.ckpt")
	r := run(pub, "--train-set", "mtfl")
	if r.TrainSet != "mtfl" || r.Images != 3 || r.Identities != 0 || r.DP || r.Trainable == 0 {
		t.Errorf("public run report %+v: want 3 MTFL images, no identities, no DP", r)
	}
	priv := filepath.Join(dir, "private.ckpt")
	d := run(priv, "--min-images", "1", "--init", pub, "--freeze-blocks", "12", "--dp", "--noise-multiplier", "1", "--sampling-rate", "0.5")
	if d.TrainSet != "lfw" || !d.DP || !(d.Epsilon > 0) || d.Init != pub || d.FrozenBlocks != 12 || !(d.Trainable > 0 && d.Trainable < r.Trainable) {
		t.Errorf("DP fine-tuning report %+v (public run trained %d parameters)", d, r.Trainable)
	}
	a, err := checkpoint.Load(pub)
	if err != nil {
		t.Fatal(err)
	}
	b, err := checkpoint.Load(priv)
	if err != nil {
		t.Fatal(err)
	}
	if a.Header.Data != "mtfl" || !a.Header.Public || b.Header.Data != "lfw" || b.Header.Public {
		t.Errorf("headers: public run %q/%v, DP run %q/%v", a.Header.Data, a.Header.Public, b.Header.Data, b.Header.Public)
	}
	frozen, moved := 0, 0
	for i, info := range b.Header.Params {
		if a.Header.Params[i].Name != info.Name {
			t.Fatalf("parameter %d is %q and %q", i, a.Header.Params[i].Name, info.Name)
		}
		isFrozen := false
		for blk := 1; blk <= 12; blk++ {
			isFrozen = isFrozen || strings.HasPrefix(info.Name, arch.LightFaceBlockName(blk)+"/")
		}
		same := slices.Equal(a.Values[i], b.Values[i])
		switch {
		case isFrozen && !same:
			t.Errorf("frozen parameter %s changed", info.Name)
		case isFrozen:
			frozen++
		case !same:
			moved++
		}
	}
	if frozen == 0 || moved == 0 {
		t.Errorf("%d frozen parameters kept, %d trainable ones moved; want both", frozen, moved)
	}
	// The DP run's checkpoint is private: DP training may not start from it.
	var out, errb bytes.Buffer
	args := []string{"train", "--data", data, "--min-images", "1", "--input", "32", "--loss", "distill", "--dp", "--noise-multiplier", "1", "--init", priv}
	if code := Main(args, strings.NewReader(""), &out, &errb); code == 0 || !strings.Contains(errb.String(), "trained on private data") {
		t.Errorf("DP from a private checkpoint: exit %d, %q", code, errb.String())
	}
}
