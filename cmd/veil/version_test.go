package main

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// testCommit is the commit TestMain links into the binary, as the build
// scripts link `git rev-parse HEAD`.
const testCommit = "0123456789abcdef-test"

// TestVersion: veil --version prints the version, the commit the binary was
// built from and the Go version, and exits 0.
func TestVersion(t *testing.T) {
	bin := buildVeil(t)
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("veil --version: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "veil ") || !strings.Contains(got, "commit "+testCommit) || !strings.Contains(got, runtime.Version()) {
		t.Fatalf("veil --version printed %q; want the version, commit %s and %s", got, testCommit, runtime.Version())
	}
}
