package training

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

var lfwIdentity = dp.DataSet{Name: "lfw", Unit: dp.UnitIdentity}

// ledgerOf reads the lfw identity ledger of o's ledger folder.
func ledgerOf(t *testing.T, o Options) *dp.DataLedger {
	t.Helper()
	d, err := dp.OpenLedgerDir(o.LedgerDir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.Read(lfwIdentity)
	if err != nil {
		t.Fatal(err)
	}
	return l
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
		if !e.Type().IsRegular() {
			continue
		}
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
// spent and what the run would need. Raising the budget is refused too
// (before the fix it was accepted, and the run went on); only the owner's
// explicit reset, recorded in the ledger's history, lets it continue.
func TestResumePastBudgetRefused(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	trainingtest.WriteLFW(t, data)
	ckpt := filepath.Join(out, "dp.ckpt")
	first := run(t, dpHead(data, ckpt, 2))
	if first.BudgetEpsilon != first.LedgerEpsilon || first.Epsilon == nil || *first.Epsilon > first.BudgetEpsilon {
		t.Fatalf("first run: budget %g, charged %g, ε %v: the default budget is what the run spends", first.BudgetEpsilon, first.LedgerEpsilon, first.Epsilon)
	}
	more := dpHead(data, ckpt, 4)
	more.Resume = ckpt
	before, ledgers := snapshot(t, out), snapshot(t, more.LedgerDir)
	err := runErr(more)
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("resume past the budget: err = %v, want ErrBudget", err)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("ε = %g", first.BudgetEpsilon), "2 epochs so far", "2 more epochs would bring them to", "per identity", first.Ledger} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not mention %q", msg, want)
		}
	}
	for dir, snap := range map[string]map[string][]byte{out: before, more.LedgerDir: ledgers} {
		after := snapshot(t, dir)
		if len(after) != len(snap) {
			t.Errorf("the refused run left %d files in %s, want %d", len(after), dir, len(snap))
		}
		for name, b := range snap {
			if !bytes.Equal(after[name], b) {
				t.Errorf("the refused run changed %s", name)
			}
		}
	}
	// A larger budget is refused now that the people have spent, and the
	// spending still reads.
	more.DP.BudgetEpsilon = 100
	if err := runErr(more); !errors.Is(err, dp.ErrBudgetLocked) || !strings.Contains(err.Error(), "veil privacy ledger reset") {
		t.Fatalf("raising the budget after spending: err = %v, want dp.ErrBudgetLocked naming the reset", err)
	}
	l := ledgerOf(t, more)
	if b, _ := l.Budget(); b.Epsilon != first.BudgetEpsilon {
		t.Errorf("after the refused raise the budget is %g, want %g", b.Epsilon, first.BudgetEpsilon)
	}
	if s, err := l.Spent(nil); err != nil || s.Epsilon != first.LedgerEpsilon {
		t.Errorf("after the refused raise spent reads %g (%v), want %g", s.Epsilon, err, first.LedgerEpsilon)
	}
	// The owner's reset keeping the charges lets the run go on; the
	// ledger then records all four epochs.
	d, err := dp.OpenLedgerDir(more.LedgerDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Update(lfwIdentity, func(l *dp.DataLedger) error {
		return l.Reset(dp.ResetOptions{Reason: "test: the owner allows more", Budget: &dp.Budget{Epsilon: 100, Delta: 1e-5}, KeepCharges: true})
	}); err != nil {
		t.Fatal(err)
	}
	more.DP.BudgetEpsilon = 0
	r := run(t, more)
	if r.Steps != 8 || r.BudgetEpsilon != 100 || !(r.LedgerEpsilon > first.LedgerEpsilon) || r.LedgerEpsilon < *r.Epsilon*(1-1e-9) {
		t.Errorf("resumed after the reset: %d steps, budget %g, charged %g (first run %g), ε %g", r.Steps, r.BudgetEpsilon, r.LedgerEpsilon, first.LedgerEpsilon, *r.Epsilon)
	}
	// A budget below what is spent is refused.
	more.Epochs, more.DP.BudgetEpsilon = 5, first.BudgetEpsilon
	if err := runErr(more); !errors.Is(err, dp.ErrBudgetExceeded) {
		t.Errorf("lowering the budget below the spending: err = %v", err)
	}
}

// TestCopiesDoNotResetBudget plays a user who, with the budget spent, tries
// to get a fresh one: a new run written to another checkpoint, a copy of
// the checkpoint resumed from elsewhere, a copy of the data folder. The
// data set's ledger is the same for all of them, so each is refused. On
// the old code (a ledger beside each checkpoint) the new run and the copied
// data started with a fresh budget and trained.
func TestCopiesDoNotResetBudget(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	trainingtest.WriteLFW(t, data)
	ckpt := filepath.Join(out, "dp.ckpt")
	first := run(t, dpHead(data, ckpt, 2))
	// A new run to another checkpoint.
	if err := runErr(dpHead(data, filepath.Join(out, "other.ckpt"), 1)); !errors.Is(err, ErrBudget) {
		t.Errorf("a new run on the same people: err = %v, want ErrBudget", err)
	}
	// The checkpoint copied elsewhere and resumed with one more epoch.
	copied := filepath.Join(t.TempDir(), "copy.ckpt")
	b, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o600); err != nil {
		t.Fatal(err)
	}
	o := dpHead(data, filepath.Join(out, "resumed.ckpt"), 3)
	o.Resume = copied
	if err := runErr(o); !errors.Is(err, ErrBudget) {
		t.Errorf("resuming a copy of the checkpoint: err = %v, want ErrBudget", err)
	}
	// The data folder copied.
	data2 := t.TempDir()
	if err := exec.Command("cp", "-a", data+"/.", data2).Run(); err != nil {
		t.Fatal(err)
	}
	if err := runErr(dpHead(data2, filepath.Join(out, "copied-data.ckpt"), 1)); !errors.Is(err, ErrBudget) {
		t.Errorf("a run on a copy of the data folder: err = %v, want ErrBudget", err)
	}
	l := ledgerOf(t, dpHead(data, ckpt, 1))
	if s, err := l.Spent(nil); err != nil || s.Epsilon != first.LedgerEpsilon {
		t.Errorf("after the refused runs the ledger reads %g (%v), want %g", s.Epsilon, err, first.LedgerEpsilon)
	}
}

// addPerson adds Train_E (a copy of Train_A's images under another name)
// to the training people of the LFW folder dir.
func addPerson(t *testing.T, dir string) {
	t.Helper()
	from, to := filepath.Join(dir, "images_deepfunneled", "Train_A"), filepath.Join(dir, "images_deepfunneled", "Train_E")
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 3; k++ {
		b, err := os.ReadFile(filepath.Join(from, fmt.Sprintf("Train_A_%04d.jpg", k)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, fmt.Sprintf("Train_E_%04d.jpg", k)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "peopleDevTrain.txt"), []byte("3\nTrain_A\t3\nTrain_B\t3\nTrain_E\t3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSubsetRunComposesWithFullRun: a run on the first two people
// (MaxPeople 2, as --max-people), then a run on all three: the two carry
// both runs, the third one, and the report of the second run states the
// worst. (On the old code each run had its own ledger: the second
// reported only its own ε.)
func TestSubsetRunComposesWithFullRun(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	trainingtest.WriteLFW(t, data)
	addPerson(t, data)
	sub := dpHead(data, filepath.Join(out, "sub.ckpt"), 1)
	sub.Data.MaxPeople, sub.DP.BudgetEpsilon = 2, 50
	r1 := run(t, sub)
	r2 := run(t, dpHead(data, filepath.Join(out, "all.ckpt"), 1))
	l := ledgerOf(t, sub)
	g, err := l.Groups()
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 3 || g[0].Members != 2 || g[0].Events != 2 || g[1].Members != 1 || g[1].Events != 1 {
		t.Fatalf("groups %+v: want two people with both runs, one with the second", g)
	}
	if !(r2.LedgerEpsilon > *r2.Epsilon) || r2.LedgerEpsilon != g[0].Epsilon || r1.LedgerEpsilon != *r1.Epsilon {
		t.Errorf("second run: ledger ε %g, its own ε %g, worst person %g: the ledger must state the composition", r2.LedgerEpsilon, *r2.Epsilon, g[0].Epsilon)
	}
}

// TestLedgerMismatchRefused plays a user who resumes a checkpoint with the
// ledger removed, damaged, at another δ, left in the old format, or
// without DP, to escape the budget.
func TestLedgerMismatchRefused(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	trainingtest.WriteLFW(t, data)
	long := filepath.Join(out, "long.ckpt")
	long2 := dpHead(data, long, 2)
	long2.DP.BudgetEpsilon = 100
	run(t, long2)
	path := filepath.Join(long2.LedgerDir, "lfw.identity.ledger")
	good, err := os.ReadFile(path)
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
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check("missing ledger", "has no privacy ledger", resume)
	if err := os.WriteFile(path, good[:len(good)-20], 0o600); err != nil {
		t.Fatal(err)
	}
	check("damaged ledger", "cannot be trusted", resume)
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	od := dpHead(data, long, 3)
	od.Resume, od.DP.Delta = long, 1e-6
	check("another δ", "δ", od)
	noDP := headOptions(data, long)
	noDP.Epochs, noDP.Resume = 3, long
	check("continuing without DP", "unbounded", noDP)
	if err := os.WriteFile(LegacyLedgerPath(long), []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	check("an old-format ledger beside the checkpoint", "older Veil versions", resume)
	if err := os.Remove(LegacyLedgerPath(long)); err != nil {
		t.Fatal(err)
	}
	// A ledger that holds more than the checkpoint (an epoch charged, then
	// a crash before its checkpoint) is accepted and keeps the charge.
	j, err := New(resume)
	if err != nil {
		t.Fatal(err)
	}
	l, err := OpenLedger(j.Options().LedgerDir, lfwIdentity, []string{"Train_A", "Train_B"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := dp.SubsampledGaussianEvent(0.5, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Charge("a crashed epoch", ev); err != nil {
		t.Fatal(err)
	}
	crashed, err := ledgerOf(t, resume).Spent(nil)
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
		d, err := dp.OpenLedgerDir(o.LedgerDir)
		if err != nil {
			readErr = err
			return
		}
		l, err := d.Read(lfwIdentity)
		if err != nil {
			readErr = fmt.Errorf("epoch %d: %w", e.Epoch, err)
			return
		}
		s, err := l.Spent(nil)
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
