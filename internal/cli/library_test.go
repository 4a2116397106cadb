package cli

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/tagging"
)

// cheapArgon2 are init flags that make tests fast; real libraries keep the
// defaults.
var cheapArgon2 = []string{"--argon2-time", "1", "--argon2-memory", "1", "--argon2-threads", "1"}

// initTestLibrary creates a library with `veil library init` under
// VEIL_PASSPHRASE=pass (set for the rest of the test) and returns its folder.
func initTestLibrary(t *testing.T) string {
	t.Helper()
	t.Setenv(envPassphrase, "pass")
	t.Setenv(envLibrary, "")
	dir := filepath.Join(t.TempDir(), "lib")
	code, _, errs := run(t, append([]string{"library", "init", "--library", dir}, cheapArgon2...)...)
	if code != 0 {
		t.Fatalf("library init: exit %d: %s", code, errs)
	}
	return dir
}

// addLibraryPhoto records a photo with n faces through the tagging API (as
// indexing would) and returns the face ids.
func addLibraryPhoto(t *testing.T, dir, path string, n int) []int64 {
	t.Helper()
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var faces []tagging.NewFace
	for k := range n {
		faces = append(faces, tagging.NewFace{Box: tagging.Box{X: float64(10 + 100*k), Y: 20, Width: 80, Height: 90},
			Score: 0.75, Source: tagging.Detected, Descriptor: make([]float32, 128)})
	}
	_, ids, err := l.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1,
		Width: 640, Height: 480}, faces)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// mustFail runs veil, expecting exit status 1 and stderr containing want.
func mustFail(t *testing.T, want string, args ...string) {
	t.Helper()
	code, _, errs := run(t, args...)
	if code != 1 || !strings.Contains(errs, want) {
		t.Errorf("veil %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(args, " "), code, errs, want)
	}
}

func TestLibraryInitAndRekey(t *testing.T) {
	dir := initTestLibrary(t)
	st, err := os.Stat(filepath.Join(dir, tagging.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("library mode %04o, want 0600", st.Mode().Perm())
	}
	mustFail(t, "already exists", append([]string{"library", "init", "--library", dir}, cheapArgon2...)...)

	t.Setenv(envPassphrase, "wrong")
	mustFail(t, "wrong passphrase", "people", "list", "--library", dir)
	t.Setenv(envPassphrase, "pass")
	t.Setenv(envNewPassphrase, "new pass")
	code, out, errs := run(t, "library", "rekey", "--library", dir, "--argon2-time", "1", "--argon2-memory", "2", "--argon2-threads", "1")
	if code != 0 || !strings.Contains(out, "changed") {
		t.Fatalf("rekey: exit %d, %s %s", code, out, errs)
	}
	mustFail(t, "wrong passphrase", "people", "list", "--library", dir)
	// The new passphrase from a key file; --library from VEIL_LIBRARY.
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("new pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envLibrary, dir)
	if code, _, errs := run(t, "people", "list", "--key-file", key); code != 0 {
		t.Errorf("people list with the new passphrase: exit %d: %s", code, errs)
	}
	// Rekeying to the same passphrase, or with the wrong current one, fails.
	t.Setenv(envPassphrase, "new pass")
	mustFail(t, "is the current one", "library", "rekey")
	t.Setenv(envPassphrase, "pass")
	mustFail(t, "wrong passphrase", "library", "rekey")
}

func TestLibraryBadInputs(t *testing.T) {
	dir := initTestLibrary(t)
	missing := filepath.Join(t.TempDir(), "none")
	mustFail(t, "no library here", "people", "list", "--library", missing)
	mustFail(t, "pass --library DIR or set VEIL_LIBRARY", "people", "list")
	mustFail(t, "--argon2-memory", "library", "init", "--library", missing, "--argon2-memory", "0")
	mustFail(t, "--argon2-memory", "library", "init", "--library", missing, "--argon2-memory", "9000")
	os.Unsetenv(envPassphrase) // t.Setenv restores it
	mustFail(t, "no passphrase: set VEIL_PASSPHRASE", "people", "list", "--library", dir)
	t.Setenv(envPassphrase, "")
	mustFail(t, "VEIL_PASSPHRASE is set but empty", "people", "list", "--library", dir)
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "chmod 600", "people", "list", "--library", dir, "--key-file", key)
	if _, err := os.Stat(missing); err == nil {
		t.Error("a refused init created the folder")
	}
}

func TestLibraryInitJSON(t *testing.T) {
	t.Setenv(envPassphrase, "pass")
	dir := filepath.Join(t.TempDir(), "lib")
	code, out, errs := run(t, append([]string{"library", "init", "--library", dir, "--json"}, cheapArgon2...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Library string `json:"library"`
		Schema  int    `json:"schema_version"`
		KDF     struct {
			Algorithm string `json:"algorithm"`
			MemoryKiB uint32 `json:"memory_kib"`
		} `json:"kdf"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Library != dir || doc.Schema != tagging.SchemaVersion || doc.KDF.Algorithm != "argon2id" || doc.KDF.MemoryKiB != 1024 {
		t.Errorf("init JSON %+v", doc)
	}
}
