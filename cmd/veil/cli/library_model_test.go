package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/veil-privacy/veil/tagging/psimodel"
)

func writeModelFile(t *testing.T, name string, m *psimodel.Model) string {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLibraryModel: import refuses a hostile file; the identity is
// adopted, a ψ that collapses the space onto one line is refused (exit 1,
// with the reason), list shows both decisions, and rollback returns to
// plain descriptors, then has nothing left to return to.
func TestLibraryModel(t *testing.T) {
	dir := initTestLibrary(t)
	addLearnPeople(t, dir, 4, 4, 3)

	identity := writeModelFile(t, "id.vpsi", psimodel.Identity(128))
	line := psimodel.Identity(128)
	for i := range 128 {
		for o := range 128 {
			w := float32(1) / 128 // u uᵀ with u = (1, …, 1)/√128
			if i == o {
				w--
			}
			line.Layers[0].W[i*128+o] = w
		}
	}
	collapse := writeModelFile(t, "line.vpsi", line)
	hostile, err := os.ReadFile(identity)
	if err != nil {
		t.Fatal(err)
	}
	hostile = hostile[:len(hostile)-1]
	bad := filepath.Join(t.TempDir(), "bad.vpsi")
	if err := os.WriteFile(bad, hostile, 0o600); err != nil {
		t.Fatal(err)
	}

	mustFail(t, "checksum mismatch", "library", "model", "import", "--library", dir, bad)
	mustFail(t, "want a version number", "library", "model", "use", "--library", dir, "one")
	mustFail(t, "no earlier model version", "library", "model", "rollback", "--library", dir)
	if code, out, errs := run(t, "library", "model", "import", "--library", dir, identity); code != 0 {
		t.Fatalf("import: exit %d: %s %s", code, out, errs)
	}
	if code, out, errs := run(t, "library", "model", "use", "--library", dir, "1"); code != 0 {
		t.Fatalf("use 1: exit %d: %s %s", code, out, errs)
	}
	if code, _, errs := run(t, "library", "model", "import", "--library", dir, collapse); code != 0 {
		t.Fatalf("import: exit %d: %s", code, errs)
	}
	mustFail(t, "not adopted", "library", "model", "use", "--library", dir, "2")

	code, out, errs := run(t, "library", "model", "list", "--library", dir, "--json")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errs)
	}
	var got jsonModels
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if got.Active != 1 || len(got.Models) != 2 || len(got.Decisions) != 2 || !got.Decisions[0].Adopted || got.Decisions[1].Adopted ||
		got.Decisions[1].Candidate == nil || got.Decisions[1].Current == nil || math.IsNaN(got.Decisions[1].Current.Coverage) {
		t.Fatalf("list --json: %s", out)
	}
	if code, out, errs := run(t, "library", "model", "rollback", "--library", dir); code != 0 {
		t.Fatalf("rollback: exit %d: %s %s", code, out, errs)
	}
	code, out, _ = run(t, "library", "model", "list", "--library", dir)
	if code != 0 || len(out) == 0 || out[:len("in use: plain descriptors")] != "in use: plain descriptors" {
		t.Fatalf("list after rollback: exit %d: %s", code, out)
	}
	mustFail(t, "no earlier model version", "library", "model", "rollback", "--library", dir)
}
