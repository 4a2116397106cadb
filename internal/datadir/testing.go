package datadir

import (
	"os"
	"path/filepath"
	"testing"
)

// ForTest returns the path of rel inside the data folder and fails the test
// (it does not skip) when it is missing: the shared data is part of the
// test environment, in CI as on developers' machines.
func ForTest(t testing.TB, rel ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{Default()}, rel...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test data missing: %v (set %s or put shared/data beside the checkout)", err, EnvData)
	}
	return p
}

// ModelDirForTest returns the face-api model folder installed by
// scripts/install-models.sh in this checkout, failing the test (not
// skipping) when it is missing.
func ModelDirForTest(t testing.TB) string {
	t.Helper()
	root, ok := RepoRoot()
	if !ok {
		t.Fatal("cannot find the repository root (go.mod)")
	}
	d := filepath.Join(root, "models", "node_modules", "@vladmandic", "face-api", "model")
	if _, err := os.Stat(d); err != nil {
		t.Fatalf("models not installed (run scripts/install-models.sh): %v", err)
	}
	return d
}
