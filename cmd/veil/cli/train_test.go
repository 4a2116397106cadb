package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/training"
)

// TestTrainRefusesBadConfigurations: the flag-level checks of veil train
// and a sample of the library's (training.Options.Validate, tested in
// full there) reaching the user.
func TestTrainRefusesBadConfigurations(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"train", "--train-set", "mtfl", "--loss", "distill", "--min-images", "2"}, "--min-images selects LFW identities"},
		{[]string{"train", "--noise-multiplier", "1"}, "--noise-multiplier needs --dp"},
		{[]string{"train", "--budget-epsilon", "8"}, "--budget-epsilon needs --dp"},
		{[]string{"train", "--privacy-unit", "example"}, "--privacy-unit needs --dp"},
		{[]string{"train", "--dp", "--sampling-rate", "0", "--noise-multiplier", "1"}, "(0, 1]"},
		{[]string{"train", "--features", "agegender"}, "LightFace reads images"},
		{[]string{"train", "--model", "head", "--norm", "group"}, "no normalisation"},
		{[]string{"train", "--epochs", "0"}, "--epochs must be at least 1, got 0"},
		{[]string{"train", "--dp", "--privacy-unit", "household", "--noise-multiplier", "1"}, `--privacy-unit must be identity or example, got "household"`},
		{[]string{"train", "--dp"}, "--dp needs the noise: --noise-multiplier"},
		{[]string{"train", "--train-set", "mtfl"}, "needs the distill loss"},
		{[]string{"train", "--model", "resnet"}, `--model must be lightface or head, got "resnet"`},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := Main(tc.args, strings.NewReader(""), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want failure mentioning %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestTrainQuietAndDefaultCheckpoint: --quiet leaves stderr empty (no
// describing or epoch bars, no notes); without --checkpoint the checkpoint
// goes to out/veil-train.ckpt, which the summary names, and never to the
// current folder; --report writes the JSON report while the summary is
// printed.
func TestTrainQuietAndDefaultCheckpoint(t *testing.T) {
	data := t.TempDir()
	writeTinyLFW(t, data)
	work := t.TempDir()
	t.Chdir(work)
	// LightFace on small crops: no pretrained network to load.
	args := []string{"train", "--model", "lightface", "--input", "32", "--data", data, "--min-images", "1",
		"--epochs", "2", "--batch", "4", "--micro-batch", "4", "--loss", "cosface"}
	var out, errb bytes.Buffer
	if code := Main(append(args, "--quiet", "--report", "report.json"), strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if errb.Len() != 0 {
		t.Errorf("--quiet wrote to stderr: %q", errb.String())
	}
	want := filepath.Join("out", "veil-train.ckpt")
	if _, err := os.Stat(filepath.Join(work, want)); err != nil {
		t.Errorf("default checkpoint: %v", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(work, "*.ckpt")); len(ents) != 0 {
		t.Errorf("checkpoints in the current folder: %v", ents)
	}
	if !strings.Contains(out.String(), "checkpoint: "+want) || !strings.Contains(out.String(), "LFW development pairs: accuracy") {
		t.Errorf("summary does not say where the checkpoint is: %q", out.String())
	}
	if !strings.Contains(out.String(), "ε is unbounded") {
		t.Errorf("summary of a run without DP on private data does not say ε is unbounded: %q", out.String())
	}
	b, err := os.ReadFile(filepath.Join(work, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r training.Report
	if err := json.Unmarshal(b, &r); err != nil || r.Checkpoint != want || r.Steps != 4 {
		t.Errorf("report %+v (%v): want the default checkpoint and 4 steps", r, err)
	}
	// Without --quiet the epochs and the checkpoint's place are shown.
	out.Reset()
	errb.Reset()
	if code := Main(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, w := range []string{"epoch 2/2", "checkpoint after every epoch: " + want} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr without --quiet lacks %q: %q", w, errb.String())
		}
	}
}

// TestTrainProgressWritesPlainLinesToLogs: when stderr is a file (a log),
// training progress is plain lines, one per finished epoch and per finished
// description, with no carriage returns redrawing a bar.
func TestTrainProgressWritesPlainLinesToLogs(t *testing.T) {
	log, err := os.Create(filepath.Join(t.TempDir(), "train.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	p := &trainProgress{w: log}
	p.event(training.Event{Kind: training.EventDescribe, Label: "train", Total: 2})
	p.event(training.Event{Kind: training.EventDescribe, Label: "train", Done: 1, Total: 2})
	p.event(training.Event{Kind: training.EventDescribe, Label: "train", Done: 2, Total: 2})
	for step := 1; step <= 3; step++ {
		p.event(training.Event{Kind: training.EventStep, Epoch: 1, Epochs: 2, Done: step, Total: 3, Loss: 0.5})
	}
	p.event(training.Event{Kind: training.EventEpoch, Epoch: 1, Epochs: 2, Loss: 0.5})
	p.event(training.Event{Kind: training.EventNote, Message: "done"})
	b, err := os.ReadFile(log.Name())
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "\r") || !strings.Contains(got, "epoch 1/2 mean loss 0.5000\n") || !strings.Contains(got, "describing train: 2/2") ||
		strings.Contains(got, "step 1/3") {
		t.Errorf("progress written to a log file:\n%q", got)
	}
}
