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
