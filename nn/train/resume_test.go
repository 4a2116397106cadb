package train_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// TestResumeCannotLaunderPrivacy plays the laundering attack through real
// checkpoint files: a DP-SGD run, resumed without DP on the same private
// data (its noiseless steps used to go uncounted), then resumed with DP
// again, which used to be accepted with an ε covering only the private
// steps. The non-private steps must be recorded, survive saving and
// loading, and make the DP resume fail; an honest DP → DP resume still
// works and keeps counting.
func TestResumeCannotLaunderPrivacy(t *testing.T) {
	dir := t.TempDir()
	mc := arch.Config{Kind: "head", In: 8, Hidden: 8}
	lc := loss.Config{Kind: "cosface", Classes: 3}.Defaults()
	x, l := batch(24, 8, 3, 5)
	data := &memData{x: x, l: l, per: 8}
	dpOpts := func(unit train.Unit) *train.DPOptions {
		return &train.DPOptions{Unit: unit, NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.25, Delta: 1e-5, DatasetSize: 24, Source: seeded(9)}
	}
	newTrainer := func(d *train.DPOptions) *train.Trainer {
		return build(t, mc, lc, train.Options{Optimizer: "adam", LearningRate: 0.01, MicroBatch: 8, DP: d})
	}
	save := func(tr *train.Trainer, name string, epoch int) string {
		path := filepath.Join(dir, name)
		if err := checkpoint.FromTrainer(checkpoint.Header{Model: mc, Loss: lc, Optimizer: "adam", Epoch: epoch}, tr.Params(), tr.State()).Save(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	resume := func(path string, d *train.DPOptions) (*train.Trainer, error) {
		ck, err := checkpoint.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		tr := newTrainer(d)
		if err := ck.Apply(mc, tr.Params()); err != nil {
			t.Fatal(err)
		}
		return tr, tr.Restore(ck.State)
	}
	epoch := func(tr *train.Trainer, ep int) {
		if _, err := tr.Epoch(data, train.EpochOptions{Epoch: ep, Batch: 8, Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}

	private := newTrainer(dpOpts(train.UnitExample))
	epoch(private, 0)
	spent := private.Privacy()
	if spent.Steps != 4 || !spent.Bounded() || spent.Epsilon <= 0 {
		t.Fatalf("after one DP epoch: %+v", spent)
	}
	dpCkpt := save(private, "dp.ckpt", 1)

	// Resume without DP: the record is kept and the plain steps counted.
	plain, err := resume(dpCkpt, nil)
	if err != nil {
		t.Fatal(err)
	}
	epoch(plain, 1)
	p := plain.Privacy()
	if p.Steps != spent.Steps || p.Epsilon != spent.Epsilon || p.Unit != train.UnitExample || p.NonPrivateSteps != 3 || p.Bounded() {
		t.Fatalf("after a non-private epoch: %+v, want the DP record kept and 3 non-private steps", p)
	}
	launder := save(plain, "laundered.ckpt", 2)
	ck, err := checkpoint.Load(launder)
	if err != nil {
		t.Fatal(err)
	}
	if got := ck.State.Privacy; got.NonPrivateSteps != 3 || got.Bounded() {
		t.Fatalf("the checkpoint file lost the non-private steps: %+v", got)
	}

	// The DP resume from the laundered weights is refused.
	if _, err := resume(launder, dpOpts(train.UnitExample)); err == nil || !strings.Contains(err.Error(), "without DP-SGD") {
		t.Errorf("DP resume from weights trained without DP: err = %v, want a refusal", err)
	}
	// Also for a checkpoint written before the marker existed: its step
	// count exceeds its DP steps.
	ck.State.Privacy.NonPrivateSteps = 0
	old := newTrainer(dpOpts(train.UnitExample))
	if err := old.Restore(ck.State); err == nil {
		t.Error("DP resume from an unmarked checkpoint with more steps than DP steps was accepted")
	}
	// And the marker stays through further non-private resumes.
	again, err := resume(launder, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Step(x[:8*8], l[:8]); err != nil {
		t.Fatal(err)
	}
	if got := again.Privacy().NonPrivateSteps; got != 4 {
		t.Errorf("non-private steps after one more plain step: %d, want 4", got)
	}

	// Honest DP → DP resume: accepted, ε recomputed, steps go on.
	honest, err := resume(dpCkpt, dpOpts(train.UnitExample))
	if err != nil {
		t.Fatalf("DP resume of a DP checkpoint: %v", err)
	}
	if got := honest.Privacy(); got.Steps != spent.Steps || got.Epsilon != spent.Epsilon {
		t.Errorf("resumed record %+v, want %+v", got, spent)
	}
	epoch(honest, 1)
	if got := honest.Privacy(); got.Steps != 2*spent.Steps || !(got.Epsilon > spent.Epsilon) {
		t.Errorf("after another DP epoch: %+v", got)
	}
	// A change of privacy unit is refused.
	if _, err := resume(dpCkpt, dpOpts(train.UnitIdentity)); err == nil || !strings.Contains(err.Error(), "per example") {
		t.Errorf("resuming an example-level run per identity: err = %v, want a refusal", err)
	}
}
