package training

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training/trainingtest"
)

// dpHead is headOptions under identity-level DP-SGD (σ = 1, q = 0.5).
func dpHead(dir, ckpt string, epochs int) Options {
	o := headOptions(dir, ckpt)
	o.Epochs = epochs
	o.DP = &DPOptions{Unit: train.UnitIdentity, NoiseMultiplier: 1, SamplingRate: 0.5, Clip: 1, Delta: 1e-5}
	return o
}

// snapshot returns every file of dir with its content.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func runErr(o Options) error {
	j, err := New(o)
	if err != nil {
		return err
	}
	_, err = j.Run(context.Background())
	return err
}

// TestResumePastBudgetRefused plays a user who resumes a finished DP run
// with more epochs than its budget allows: the run is refused before
// anything is written, with a message that names the budget, what was
// spent and what the run would need; raising the budget explicitly lets
// it continue.
func TestResumePastBudgetRefused(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	trainingtest.WriteLFW(t, data)
	ckpt := filepath.Join(out, "dp.ckpt")
	first := run(t, dpHead(data, ckpt, 2))
	if first.BudgetEpsilon != first.LedgerEpsilon || first.Epsilon == nil || *first.Epsilon > first.BudgetEpsilon {
		t.Fatalf("first run: budget %g, charged %g, ε %v: the default budget is what the run spends", first.BudgetEpsilon, first.LedgerEpsilon, first.Epsilon)
	}
	before := snapshot(t, out)
	if len(before) != 2 {
		t.Fatalf("after one run %s holds %d files, want the checkpoint and its ledger", out, len(before))
	}
	more := dpHead(data, ckpt, 4)
	more.Resume = ckpt
	err := runErr(more)
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("resume past the budget: err = %v, want ErrBudget", err)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("ε = %g", first.BudgetEpsilon), "2 epochs have spent", "2 more would bring it to", "per identity", LedgerPath(ckpt)} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not mention %q", msg, want)
		}
	}
	after := snapshot(t, out)
	if len(after) != len(before) {
		t.Errorf("the refused run left %d files, want %d", len(after), len(before))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Errorf("the refused run changed %s", name)
		}
	}
	// An explicit, larger budget lets the run continue; the ledger then
	// records all four epochs.
	more.DP.BudgetEpsilon = 100
	r := run(t, more)
	if r.Steps != 8 || r.BudgetEpsilon != 100 || !(r.LedgerEpsilon > first.LedgerEpsilon) || r.LedgerEpsilon < *r.Epsilon*(1-1e-9) {
		t.Errorf("resumed with a larger budget: %d steps, budget %g, charged %g (first run %g), ε %g", r.Steps, r.BudgetEpsilon, r.LedgerEpsilon, first.LedgerEpsilon, *r.Epsilon)
	}
	// A budget below what is spent is refused.
	more.Epochs, more.DP.BudgetEpsilon = 5, first.BudgetEpsilon
	if err := runErr(more); err == nil || !strings.Contains(err.Error(), "already spent") {
		t.Errorf("lowering the budget below the spending: err = %v", err)
	}
}

// TestLedgerMismatchRefused plays a user who pairs a checkpoint with the
// wrong ledger, or none, to escape the budget.
func TestLedgerMismatchRefused(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	trainingtest.WriteLFW(t, data)
	short, long := filepath.Join(out, "short.ckpt"), filepath.Join(out, "long.ckpt")
	run(t, dpHead(data, short, 1))
	long2 := dpHead(data, long, 2)
	long2.DP.BudgetEpsilon = 100
	run(t, long2)
	shortLedger, err := os.ReadFile(LedgerPath(short))
	if err != nil {
		t.Fatal(err)
	}
	longLedger, err := os.ReadFile(LedgerPath(long))
	if err != nil {
		t.Fatal(err)
	}
	resume := dpHead(data, long, 3)
	resume.Resume = long
	check := func(name, want string, o Options) {
		t.Helper()
		if err := runErr(o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one mentioning %q", name, err, want)
		}
	}
	// The shorter run's ledger records less than the checkpoint spent.
	if err := os.WriteFile(LedgerPath(long), shortLedger, 0o644); err != nil {
		t.Fatal(err)
	}
	check("another run's smaller ledger", "less than the ε", resume)
	// No ledger at all.
	if err := os.Remove(LedgerPath(long)); err != nil {
		t.Fatal(err)
	}
	check("missing ledger", "is missing", resume)
	// A damaged ledger.
	if err := os.WriteFile(LedgerPath(long), []byte(`{"version": 1, "orders": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	check("damaged ledger", "privacy ledger", resume)
	// A ledger kept at another δ.
	other := filepath.Join(out, "delta.ckpt")
	od := dpHead(data, other, 3)
	od.DP.Delta, od.DP.BudgetEpsilon = 1e-6, 1000
	run(t, od)
	otherLedger, err := os.ReadFile(LedgerPath(other))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(LedgerPath(long), otherLedger, 0o644); err != nil {
		t.Fatal(err)
	}
	check("ledger at another δ", "δ", resume)
	// With its own ledger back, training the weights without DP is refused.
	if err := os.WriteFile(LedgerPath(long), longLedger, 0o644); err != nil {
		t.Fatal(err)
	}
	noDP := headOptions(data, long)
	noDP.Epochs, noDP.Resume = 3, long
	check("continuing without DP", "unbounded", noDP)
	// A ledger that holds more than the checkpoint (an epoch charged,
	// then a crash before its checkpoint) is accepted and keeps the charge.
	l, ok, err := OpenLedger(LedgerPath(long), "lfw")
	if err != nil || !ok {
		t.Fatalf("OpenLedger: %v, %v", ok, err)
	}
	ev, err := dp.SubsampledGaussianEvent(0.5, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := l.Charge(ev)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, resume)
	if r.Steps != 6 || !(r.LedgerEpsilon > crashed.Epsilon) {
		t.Errorf("resumed after a lost epoch: %d steps, charged %g (before the run %g)", r.Steps, r.LedgerEpsilon, crashed.Epsilon)
	}
}

// TestChargeIsOnDiskBeforeTheEpoch reads the ledger file while each
// epoch runs: it must already hold that epoch's charge.
func TestChargeIsOnDiskBeforeTheEpoch(t *testing.T) {
	data := t.TempDir()
	trainingtest.WriteLFW(t, data)
	ckpt := filepath.Join(t.TempDir(), "dp.ckpt")
	o := dpHead(data, ckpt, 3)
	var seen []float64
	var readErr error
	o.Progress = func(e Event) {
		if e.Kind != EventStep || e.Done != 1 {
			return
		}
		l, ok, err := OpenLedger(LedgerPath(ckpt), "lfw")
		if err != nil || !ok {
			readErr = fmt.Errorf("epoch %d: ledger %v, %v", e.Epoch, ok, err)
			return
		}
		s, err := l.Spent()
		if err != nil {
			readErr = err
		}
		seen = append(seen, s.Epsilon)
	}
	r := run(t, o)
	if readErr != nil {
		t.Fatal(readErr)
	}
	// During epoch k the ledger holds k epochs: the last epoch's reading
	// is already the total.
	if len(seen) != 3 || !slices.IsSorted(seen) || seen[0] <= 0 || seen[2] != r.LedgerEpsilon || seen[1] == seen[2] {
		t.Errorf("ledger during epochs 1-3: %v; after the run %g", seen, r.LedgerEpsilon)
	}
}

// TestNewRunReplacesLedger: a new run (no resume) writing over a DP
// checkpoint starts a new lineage: with DP a new ledger, without DP none.
func TestNewRunReplacesLedger(t *testing.T) {
	data := t.TempDir()
	trainingtest.WriteLFW(t, data)
	ckpt := filepath.Join(t.TempDir(), "x.ckpt")
	big := dpHead(data, ckpt, 2)
	big.DP.BudgetEpsilon = 100
	run(t, big)
	small := run(t, dpHead(data, ckpt, 1))
	if small.BudgetEpsilon != small.LedgerEpsilon {
		t.Errorf("a new DP run kept the old ledger: budget %g, charged %g", small.BudgetEpsilon, small.LedgerEpsilon)
	}
	run(t, headOptions(data, ckpt))
	if _, err := os.Stat(LedgerPath(ckpt)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a new run without DP left the replaced checkpoint's ledger: %v", err)
	}
}

// TestTargetEpsilonIsTheBudget: σ calibrated to a target ε spends it in
// the run's epochs, the target becomes the budget, and a resume with more
// epochs (σ stays the checkpoint's) is refused.
func TestTargetEpsilonIsTheBudget(t *testing.T) {
	data := t.TempDir()
	trainingtest.WriteLFW(t, data)
	ckpt := filepath.Join(t.TempDir(), "dp.ckpt")
	o := dpHead(data, ckpt, 2)
	o.DP.NoiseMultiplier, o.DP.TargetEpsilon = 0, 4
	r := run(t, o)
	if r.Epsilon == nil || !(*r.Epsilon <= 4 && *r.Epsilon > 3.99) || r.BudgetEpsilon != 4 {
		t.Fatalf("ε %v, budget %g: want ε just under the target 4, which is the budget", r.Epsilon, r.BudgetEpsilon)
	}
	o.Resume, o.Epochs = ckpt, 3
	if err := runErr(o); !errors.Is(err, ErrBudget) {
		t.Errorf("resume with a third epoch: err = %v, want ErrBudget", err)
	}
}
