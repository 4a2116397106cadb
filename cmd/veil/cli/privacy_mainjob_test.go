package cli

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// mainJobTrainer builds the trainer of the main job's private run
// (scripts/main-job.sh: --model head --features agegender --loss distill
// --batch 512 --epochs 20 --dp --target-epsilon 8 --delta 1e-5 --clip 1 on
// LFW's 4,038 development training identities) the way veil train does:
// σ from train.NoiseForTarget, then train.New. It returns the trainer, its
// noised dimension, q and the run's number of steps.
func mainJobTrainer(t *testing.T) (tr *train.Trainer, dim int, q float64, steps int) {
	t.Helper()
	const people, batch, epochs = 4038, 512, 20
	model, err := arch.New(arch.Config{Kind: "head", Features: arch.HeadAgeGender})
	if err != nil {
		t.Fatal(err)
	}
	target := make([]float32, 128)
	target[0] = 1
	head, err := loss.New(model.Params(), loss.Config{Kind: "distill", Classes: 1, Targets: [][]float32{target}}, 128)
	if err != nil {
		t.Fatal(err)
	}
	dim = train.NoisedDimension(model.Params(), nil)
	q = math.Min(1, float64(batch)/float64(people)) // training.Mechanism's default rate
	steps = epochs * int(math.Ceil(1/q))            // Trainer.StepsPerEpoch under DP
	dpo := train.DPOptions{Unit: train.UnitIdentity, Clip: 1, SamplingRate: q, Delta: 1e-5, DatasetSize: people}
	if dpo.NoiseMultiplier, err = train.NoiseForTarget(dpo, dim, steps, 8); err != nil {
		t.Fatal(err)
	}
	tr, err = train.New(model, head, train.Options{Optimizer: "adam", LearningRate: 1e-3, MicroBatch: 32, DP: &dpo})
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.StepsPerEpoch(people, batch) * epochs; got != steps {
		t.Fatalf("the trainer takes %d steps, the test assumed %d", got, steps)
	}
	return tr, dim, q, steps
}

// TestPrivacyCommandsAgreeWithTrainer: veil privacy epsilon and noise
// account the mechanism the trainer runs. For the main job's schedule,
// epsilon reports what the trainer's event costs in a ledger (within
// 1e-9) and noise returns the σ the trainer picks for ε = 8. Before, the
// commands accounted the continuous Gaussian: ε 7.80 and σ 1.3038 against
// the trainer's 8.00 at σ 1.3242.
func TestPrivacyCommandsAgreeWithTrainer(t *testing.T) {
	tr, dim, q, steps := mainJobTrainer(t)
	sigma := tr.Privacy().NoiseMultiplier
	ev, err := tr.EventOf(steps)
	if err != nil {
		t.Fatal(err)
	}
	led, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := led.SetBudget("lfw", dp.Budget{Epsilon: 8, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	spent, err := led.Charge("lfw", ev)
	if err != nil {
		t.Fatal(err)
	}
	fq, fs := strconv.FormatFloat(q, 'g', -1, 64), strconv.FormatFloat(sigma, 'g', -1, 64)
	sched := []string{"--sampling-rate", fq, "--steps", strconv.Itoa(steps), "--dimension", strconv.Itoa(dim), "--clip", "1", "--json"}
	code, out, errs := runVeil(t, "", append([]string{"privacy", "epsilon", "--noise-multiplier", fs}, sched...)...)
	if code != 0 {
		t.Fatalf("epsilon: exit %d: %s", code, errs)
	}
	var er privacyEpsilonReport
	if err := json.Unmarshal([]byte(out), &er); err != nil {
		t.Fatal(err)
	}
	if math.Abs(er.Epsilon-spent.Epsilon) > 1e-9 || er.Mechanism != "discrete" {
		t.Errorf("veil privacy epsilon: ε = %.12g (%s), the trainer's ledger charges %.12g", er.Epsilon, er.Mechanism, spent.Epsilon)
	}
	t.Logf("main job: d = %d, q = %.6g, %d steps, σ = %.6g: ledger ε = %.9g, command ε = %.9g", dim, q, steps, sigma, spent.Epsilon, er.Epsilon)
	code, out, errs = runVeil(t, "", append([]string{"privacy", "noise", "--epsilon", "8"}, sched...)...)
	if code != 0 {
		t.Fatalf("noise: exit %d: %s", code, errs)
	}
	var nr privacyNoiseReport
	if err := json.Unmarshal([]byte(out), &nr); err != nil {
		t.Fatal(err)
	}
	if nr.NoiseMultiplier != sigma {
		t.Errorf("veil privacy noise: σ = %.9g, the trainer uses %.9g", nr.NoiseMultiplier, sigma)
	}
	// Without --dimension the default is still the trainer's mechanism
	// (before the rounding, within a relative 1e-5 of its ε); the
	// continuous Gaussian must be asked for and is named.
	code, out, _ = runVeil(t, "", "privacy", "epsilon", "--noise-multiplier", fs, "--sampling-rate", fq, "--steps", strconv.Itoa(steps), "--json")
	if err := json.Unmarshal([]byte(out), &er); code != 0 || err != nil || math.Abs(er.Epsilon-spent.Epsilon) > 1e-5*spent.Epsilon {
		t.Errorf("without --dimension: exit %d, %s", code, out)
	}
	code, out, _ = runVeil(t, "", "privacy", "epsilon", "--noise-multiplier", fs, "--sampling-rate", fq, "--steps", strconv.Itoa(steps), "--mechanism", "gaussian")
	if code != 0 || !strings.Contains(out, "continuous Gaussian") || !strings.HasPrefix(out, "ε = 7.80") {
		t.Errorf("--mechanism gaussian: exit %d, %q", code, out)
	}
	code, out, _ = runVeil(t, "", append([]string{"privacy", "epsilon", "--noise-multiplier", fs}, sched[:len(sched)-1]...)...)
	if code != 0 || !strings.Contains(out, "discrete Gaussian on DP-SGD's grid") || !strings.HasPrefix(out, "ε = 8.000 ") {
		t.Errorf("text output: exit %d, %q", code, out)
	}
}

// TestPrivacyScheduleFlags: the mechanism flags are checked.
func TestPrivacyScheduleFlags(t *testing.T) {
	base := []string{"privacy", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "10"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mechanism", "laplace"}, "--mechanism"},
		{[]string{"--mechanism", "gaussian", "--dimension", "10"}, "only --mechanism discrete"},
		{[]string{"--clip", "2"}, "--clip needs --dimension"},
		{[]string{"--dimension", "0"}, "--dimension must be at least 1"},
		{[]string{"--dimension", "10", "--clip", "-1"}, "--clip"},
		{[]string{"--accountant", "pld"}, "continuous Gaussian only"},
	} {
		code, _, errs := runVeil(t, "", append(base, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q does not mention %q", c.args, code, errs, c.want)
		}
	}
}

// TestPrivacySmallEpsilonText: text output keeps significant digits, so a
// small ε is not printed as 0.0005 or 0.0000.
func TestPrivacySmallEpsilonText(t *testing.T) {
	code, out, errs := runVeil(t, "", "privacy", "noise", "--sampling-rate", "0.01", "--steps", "1000", "--epsilon", "0.00054")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "ε = 0.0005") || strings.Contains(out, "ε = 0.0005 ") {
		t.Errorf("small ε printed without its significant digits: %q", out)
	}
	code, _, errs = runVeil(t, "", "privacy", "noise", "--sampling-rate", "0.01", "--steps", "1000", "--epsilon", "0.000536")
	if code == 0 || !strings.Contains(errs, "0.000536") {
		t.Errorf("the floor was not refused with its value: exit %d, %q", code, errs)
	}
}
