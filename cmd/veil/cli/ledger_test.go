package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

// testLedgers points the default ledger folder at a temporary one (for
// TestMain), so that no test charges the ledgers of the user running it;
// tests that charge take a folder of their own (isolateLedgers).
func testLedgers() (cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "veil-cli-ledgers-")
	if err != nil {
		return nil, err
	}
	if err := os.Setenv(dp.EnvLedgers, dir); err != nil {
		return nil, err
	}
	return func() { os.RemoveAll(dir) }, nil
}

// isolateLedgers gives the test a default ledger folder of its own.
func isolateLedgers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv(dp.EnvLedgers, dir)
	return dir
}

// TestTrainThenDPLCCompose plays an owner who trains with DP on the tiny
// LFW folder's two people (the budget is what the training spends), then
// releases DPLC centres of the same two people: the release is refused,
// because the people have spent their budget in another command. On the
// old code veil privacy dplc kept its own ledger file (--ledger) and
// released. After the owner's explicit reset the release goes through,
// the two commands compose in the people's ε, and the history shows both
// commands and the reset.
func TestTrainThenDPLCCompose(t *testing.T) {
	ledgers := isolateLedgers(t)
	data, cache := t.TempDir(), t.TempDir()
	writeTinyLFW(t, data)
	r := trainJSON(t, []string{"train", "--model", "head", "--data", data, "--cache", cache, "--min-images", "1",
		"--epochs", "2", "--batch", "4", "--micro-batch", "4", "--loss", "cosface", "--checkpoint", filepath.Join(t.TempDir(), "dp.ckpt"),
		"--dp", "--noise-multiplier", "1", "--sampling-rate", "0.5", "--json", "-q"})
	if r.Epsilon == nil || r.Ledger != filepath.Join(ledgers, "lfw.identity.ledger") || r.BudgetEpsilon != r.LedgerEpsilon {
		t.Fatalf("training report: ε %v, ledger %q, budget %g, spent %g", r.Epsilon, r.Ledger, r.BudgetEpsilon, r.LedgerEpsilon)
	}
	dir := t.TempDir()
	centres, members := filepath.Join(dir, "centres.json"), filepath.Join(dir, "people.txt")
	if err := os.WriteFile(centres, []byte(`[[1, 0.1], [0.1, 1]]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(members, []byte("Train_A\nTrain_B\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dplc := []string{"privacy", "dplc", "--dataset", "lfw", "--members", members, "--epsilon", "0.5", "--json", centres}
	before, err := os.ReadFile(r.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := runVeil(t, "", dplc...)
	if code == 0 || out != "" || !strings.Contains(errs, "refusing to release") {
		t.Fatalf("DPLC on people whose budget the training spent: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if after, _ := os.ReadFile(r.Ledger); string(after) != string(before) {
		t.Error("the refused release changed the ledger")
	}
	if code, _, errs := runVeil(t, "", "privacy", "ledger", "reset", "lfw", "--reason", "test: allow the release",
		"--budget-epsilon", "100", "--budget-delta", "1e-5", "--keep-charges"); code != 0 {
		t.Fatalf("reset: exit %d: %s", code, errs)
	}
	code, out, errs = runVeil(t, "", dplc...)
	if code != 0 {
		t.Fatalf("DPLC after the reset: exit %d: %s", code, errs)
	}
	var rel struct {
		AccountantEpsilon float64 `json:"accountant_epsilon"`
		Ledger            struct {
			SpentEpsilon float64 `json:"spent_epsilon"`
		}
	}
	if err := json.Unmarshal([]byte(out), &rel); err != nil {
		t.Fatal(err)
	}
	if !(rel.Ledger.SpentEpsilon > r.LedgerEpsilon && rel.Ledger.SpentEpsilon > rel.AccountantEpsilon) {
		t.Errorf("after training (ε %g) and DPLC (ε %g) the people have spent ε %g: not composed", r.LedgerEpsilon, rel.AccountantEpsilon, rel.Ledger.SpentEpsilon)
	}
	show := mustVeil(t, "privacy", "ledger", "show", "lfw", "--history")
	for _, want := range []string{"veil train: epoch 1", "veil train: epoch 2", "test: allow the release", "veil privacy dplc", "2 members", "lfw.identity.ledger"} {
		if !strings.Contains(show, want) {
			t.Errorf("ledger show does not mention %q:\n%s", want, show)
		}
	}
	for _, name := range []string{"Train_A", "Train_B"} {
		b, _ := os.ReadFile(r.Ledger)
		if strings.Contains(string(b)+show, name) {
			t.Errorf("the ledger or its listing names %s", name)
		}
	}
}
