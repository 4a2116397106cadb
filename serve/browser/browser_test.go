package browser

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFind: $VEIL_CHROMIUM wins when it exists and is an error when it does
// not; without it and without any candidate in PATH, ErrNoBrowser.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "my-chromium")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvChromium, exe)
	if got, err := Find(); err != nil || got != exe {
		t.Fatalf("Find() = %q, %v; want %q", got, err, exe)
	}
	t.Setenv(EnvChromium, filepath.Join(dir, "missing"))
	if _, err := Find(); err == nil {
		t.Fatal("a missing $VEIL_CHROMIUM was accepted")
	}
	t.Setenv(EnvChromium, "")
	t.Setenv("PATH", dir)
	if _, err := Find(); !errors.Is(err, ErrNoBrowser) {
		t.Fatalf("no browser in PATH: %v", err)
	}
	if err := os.Rename(exe, filepath.Join(dir, "chromium")); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(); err != nil || got != filepath.Join(dir, "chromium") {
		t.Fatalf("Find() = %q, %v with chromium in PATH", got, err)
	}
}
