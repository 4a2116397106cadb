package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrivacyDPLCRefusesBeforeCharging: input DPLC cannot use (a zero
// row, a row that is zero once read as float32, centres of dimension 1)
// is refused before the ledger is charged: the ledger file is unchanged.
// The old command charged the run, then failed.
func TestPrivacyDPLCRefusesBeforeCharging(t *testing.T) {
	dir := t.TempDir()
	ledgers := filepath.Join(dir, "ledgers")
	ledger := filepath.Join(ledgers, "people.identity.ledger")
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`[[1,0,0],[0,1,0],[0.6,0.8,0]]`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runVeil(t, "", "privacy", "dplc", "--ledger-dir", ledgers, "--dataset", "people", "--budget-epsilon", "10", "--budget-delta", "1e-5", "--json", good)
	if code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errs)
	}
	before, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, data, want string }{
		{"zero row", `[[1,0,0],[0,0,0],[0.6,0.8,0]]`, "centre 1 is zero"},
		{"row zero in float32", `[[1,0,0],[1e-50,0,-1e-60]]`, "centre 1 is zero"},
		{"dimension 1", `[[1],[-2]]`, "dimension must be at least 2"},
	} {
		path := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(path, []byte(c.data), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runVeil(t, "", "privacy", "dplc", "--ledger-dir", ledgers, "--dataset", "people", path)
		if code == 0 || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q (want %q)", c.name, code, out, errs, c.want)
		}
		after, err := os.ReadFile(ledger)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Errorf("%s: the refused run changed the ledger", c.name)
		}
	}
}
