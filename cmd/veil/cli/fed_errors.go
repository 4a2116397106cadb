package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// needAuthority says how to make the authority a --pki folder lacks.
func needAuthority(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no certificate authority in %s (ca.key is missing): make one with veil fed certs init --pki %s, "+
			"or point --pki at the authority's folder", dir, dir)
	}
	return nil
}
