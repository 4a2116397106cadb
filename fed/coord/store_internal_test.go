package coord

import (
	"path/filepath"
	"testing"
)

// TestNewStateFileHasLargePages: a new state file has 64 KiB pages, so a
// transaction rewriting the running sum writes tens of pages, not
// thousands (see openStore), and zeroes the pages it frees.
func TestNewStateFileHasLargePages(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	var size int
	var mode string
	if err := st.db.QueryRow(`PRAGMA page_size`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	if err := st.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if size != 65536 || mode != "wal" {
		t.Errorf("page size %d, journal mode %q; want 65536 and wal", size, mode)
	}
	var secure int
	if err := st.db.QueryRow(`PRAGMA secure_delete`).Scan(&secure); err != nil {
		t.Fatal(err)
	}
	if secure != 1 {
		t.Errorf("secure_delete is %d, want 1 (freed pages zeroed)", secure)
	}
}
