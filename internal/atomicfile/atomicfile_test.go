package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteReplacesOrKeeps(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write := func(s string, fail error) error {
		return Write(p, 0o600, func(w io.Writer) error {
			if _, err := io.WriteString(w, s); err != nil {
				return err
			}
			return fail
		})
	}
	if err := write("one", nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := write("half", boom); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the writer's error", err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "one" {
		t.Errorf("after a failed write the file holds %q, %v; want the old %q", b, err, "one")
	}
	if err := write("two", nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Errorf("file holds %q, want %q", b, "two")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %d entries, want only the file (no temporary left)", len(ents))
	}
	if err := WriteFile(filepath.Join(dir, "no", "f"), nil, 0o600); err == nil {
		t.Error("write into a missing folder succeeded")
	}
}

func TestWriteFileMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	for _, perm := range []fs.FileMode{0o600, 0o644, 0o640} {
		p := filepath.Join(dir, perm.String())
		// The mode is the one asked for, for a new file and for a file
		// that had another mode.
		if err := os.WriteFile(p, []byte("old"), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(p, []byte("new"), perm); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != perm {
			t.Errorf("mode %v, want %v", st.Mode().Perm(), perm)
		}
		if b, _ := os.ReadFile(p); string(b) != "new" {
			t.Errorf("file holds %q", b)
		}
	}
}

// TestWriteSeesNoOtherReaderMidWrite checks that, while the writer runs,
// the target still holds the old content (the new one is in a temporary
// file of the same folder, readable by its owner only).
func TestWriteSeesNoOtherReaderMidWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(p, 0o600, func(w io.Writer) error {
		if b, _ := os.ReadFile(p); string(b) != "old" {
			t.Errorf("mid-write the target holds %q, want the old content", b)
		}
		f, ok := w.(*os.File)
		if !ok {
			t.Fatalf("writer is %T, want the temporary *os.File", w)
		}
		if filepath.Dir(f.Name()) != dir {
			t.Errorf("temporary file %s is not in the target's folder", f.Name())
		}
		st, err := f.Stat()
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("temporary file mode %v, %v; want 0600", st.Mode().Perm(), err)
		}
		_, err = io.WriteString(w, "new")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("file holds %q", b)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("syncing a missing folder succeeded")
	}
}
