//go:build unix

package desccache

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestModesUnderPermissiveUmask checks what lands on disk with umask 0,
// where modes passed to mkdir/open are used as given: every folder the
// cache makes is 0700 and every file 0600. It also checks that an old,
// world-readable entries folder is closed to other users.
func TestModesUnderPermissiveUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	root := t.TempDir()
	dir := filepath.Join(root, "fresh", "veil")
	// An old cache beside: world-readable folders and files.
	legacy := filepath.Join(dir, legacyDir, "ab")
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(legacy, strings.Repeat("ab", 32)+".vdc"), Marshal(Entry{}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the old versions' root mode
		t.Fatal(err)
	}
	c, err := Open(dir, "s")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.Put(c.Key([]byte{byte(i)}), Entry{Descriptor: []float32{float32(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	entries := 0
	err = filepath.WalkDir(filepath.Join(dir, entriesDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		want := fileMode
		if st.IsDir() {
			want = dirMode
		} else {
			entries++
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", p, got, want)
		}
		return nil
	})
	if err != nil || entries != 20 {
		t.Fatalf("walk: %v, %d entries", err, entries)
	}
	for p, want := range map[string]fs.FileMode{
		filepath.Join(dir, keyFile):   fileMode,
		filepath.Join(dir, legacyDir): dirMode,
	} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", p, got, want)
		}
	}
	// A cache folder Open creates is private; an existing one keeps its mode.
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o755 {
		t.Errorf("existing cache folder's mode changed to %#o", st.Mode().Perm())
	}
	made := filepath.Join(root, "made")
	if _, err := Open(made, "s"); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(made); st.Mode().Perm() != dirMode {
		t.Errorf("created cache folder: mode %#o, want %#o", st.Mode().Perm(), dirMode)
	}
}
