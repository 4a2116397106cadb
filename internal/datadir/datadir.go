// Package datadir locates Veil's data folder and the pretrained models
// for commands and tests: flags first, then VEIL_* environment variables,
// then defaults relative to the repository checkout.
package datadir

import (
	"os"
	"path/filepath"
)

// EnvData names the environment variable that overrides the data folder.
const EnvData = "VEIL_DATA"

// Default returns the data folder: $VEIL_DATA if set, else ../shared/data
// beside the repository checkout that contains the working directory (found
// by walking up to go.mod), else "../shared/data".
func Default() string {
	if d := os.Getenv(EnvData); d != "" {
		return d
	}
	if root, ok := RepoRoot(); ok {
		return filepath.Join(filepath.Dir(root), "shared", "data")
	}
	return filepath.Join("..", "shared", "data")
}

// RepoRoot walks up from the working directory to the folder holding go.mod.
func RepoRoot() (string, bool) {
	wd, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, true
		}
		if filepath.Dir(d) == d {
			return "", false
		}
	}
}
