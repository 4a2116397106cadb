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

// TestCreate: Create publishes a new file complete, with the mode asked
// for; on an existing path it fails with fs.ErrExist and leaves the file
// as it was; a failing writer publishes nothing; no temporary file is left
// in any case.
func TestCreate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := CreateFile(p, []byte("first"), 0o640); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("created file: %v, %v; want mode 0640", st, err)
	}
	if err := CreateFile(p, []byte("second"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("creating an existing file: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first" {
		t.Fatalf("the existing file holds %q after a second Create, want %q", b, "first")
	}
	boom := errors.New("boom")
	q := filepath.Join(dir, "other")
	err := Create(q, 0o600, func(w io.Writer) error {
		if _, err := io.WriteString(w, "half"); err != nil {
			return err
		}
		if _, err := os.Stat(q); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("mid-write the target exists (%v)", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the writer's error", err)
	}
	if _, err := os.Stat(q); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed Create left the target (%v)", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %d entries, want only the created file (no temporary left)", len(ents))
	}
	if err := CreateFile(filepath.Join(dir, "no", "f"), nil, 0o600); err == nil {
		t.Error("create in a missing folder succeeded")
	}
}

// TestCreateRace: of several goroutines creating the same file at once,
// exactly one succeeds, the others get fs.ErrExist, and the file holds the
// winner's content whole.
func TestCreateRace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- CreateFile(p, []byte{byte('a' + i), byte('a' + i), byte('a' + i)}, 0o600)
		}()
	}
	won := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			won++
		case !errors.Is(err, fs.ErrExist):
			t.Fatalf("a losing Create: %v, want fs.ErrExist", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d creators succeeded, want exactly one", won)
	}
	b, _ := os.ReadFile(p)
	if len(b) != 3 || b[0] != b[1] || b[1] != b[2] {
		t.Fatalf("the file holds %q, not one creator's whole content", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %d entries, want only the file", len(ents))
	}
}
