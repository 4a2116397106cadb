package desccache

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestRoundTripAndSettings(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, "ssd/dlib/v1")
	if err != nil {
		t.Fatal(err)
	}
	img := []byte("jpeg bytes")
	k := c.Key(img)
	if _, ok := c.Get(k); ok {
		t.Fatal("hit on empty cache")
	}
	want := Entry{Descriptor: []float32{0.5, -1.25, 3}, Fallback: true, LowScore: true, SecondDetector: true}
	if err := c.Put(k, want); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get(k)
	if !ok || !got.Fallback || !got.LowScore || !got.SecondDetector || len(got.Descriptor) != 3 || got.Descriptor[1] != -1.25 {
		t.Fatalf("got %+v %v", got, ok)
	}
	// A second Open of the same folder (the next run) reads the same key.
	again, err := Open(dir, "ssd/dlib/v1")
	if err != nil {
		t.Fatal(err)
	}
	if again.Key(img) != k {
		t.Fatal("reopening the cache changed the entry name")
	}
	if _, ok := again.Get(k); !ok {
		t.Fatal("entry lost on reopening")
	}
	other, _ := Open(dir, "tiny/dlib/v1")
	if other.Key(img) == k {
		t.Fatal("different settings share a key")
	}
	if c.Key([]byte("other image")) == k {
		t.Fatal("different images share a key")
	}
	// No temporary files left behind.
	matches, _ := filepath.Glob(filepath.Join(dir, entriesDir, "*", ".*.tmp-*"))
	keyTmp, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	if len(matches)+len(keyTmp) != 0 {
		t.Fatalf("temporary files left: %v %v", matches, keyTmp)
	}
}

func TestCorruptEntryIsAMiss(t *testing.T) {
	dir := t.TempDir()
	c, _ := Open(dir, "s")
	k := c.Key([]byte("x"))
	if err := c.Put(k, Entry{Descriptor: []float32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	p := c.path(k)
	b, _ := os.ReadFile(p)
	tests := map[string][]byte{
		"truncated": b[:len(b)-3],
		"flipped":   append(append([]byte{}, b[:8]...), append([]byte{b[8] ^ 1}, b[9:]...)...),
		"empty":     {},
	}
	for name, bad := range tests {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(p, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, ok := c.Get(k); ok {
				t.Fatal("corrupt entry returned as a hit")
			}
		})
	}
}

func TestMalformedKeysStayInside(t *testing.T) {
	c, err := Open(t.TempDir(), "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"", "a", "../../etc/passwd", strings.Repeat("z", 64), strings.Repeat("a", 63)} {
		if _, ok := c.Get(k); ok {
			t.Errorf("Get(%q) hit", k)
		}
		if err := c.Put(k, Entry{}); err == nil {
			t.Errorf("Put(%q) accepted", k)
		}
	}
}

// legacyName is how earlier versions named the entry of an image: an
// unkeyed hash anyone can compute from the photo and the settings.
func legacyName(settings string, image []byte) string {
	s := sha256.Sum256([]byte(settings))
	h := sha256.New()
	h.Write(s[:])
	h.Write(image)
	return hex.EncodeToString(h.Sum(nil))
}

// TestAdversaryCannotFindPhotoByName plays a local user who has the photo,
// knows the settings and every unkeyed naming rule, and can list the cache:
// no name on disk is one they can compute, so they cannot tell whether the
// photo was processed. (Before keyed names, legacyName was the file name.)
func TestAdversaryCannotFindPhotoByName(t *testing.T) {
	dir := t.TempDir()
	const settings = "veil-pipeline|tiny|both|0.5"
	photo := []byte("the victim's photo bytes")
	c, err := Open(dir, settings)
	if err != nil {
		t.Fatal(err)
	}
	k := c.Key(photo)
	if err := c.Put(k, Entry{Descriptor: []float32{0.1, 0.2}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(k); !ok {
		t.Fatal("control: the owner does not find the entry")
	}
	ph := sha256.Sum256(photo)
	guesses := []string{legacyName(settings, photo), hex.EncodeToString(ph[:])}
	for _, g := range guesses {
		for _, p := range []string{
			filepath.Join(dir, legacyDir, g[:2], g+".vdc"),
			filepath.Join(dir, entriesDir, g[:2], g+".vdc"),
		} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("adversary found the entry at %s", p)
			}
		}
	}
	found := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, g := range guesses {
			if strings.Contains(d.Name(), g) {
				t.Errorf("name %s is computable from the photo", p)
			}
		}
		if strings.HasSuffix(d.Name(), ".vdc") {
			found++
		}
		return nil
	})
	if err != nil || found != 1 {
		t.Fatalf("walk: %v, %d entries", err, found)
	}
	// An entry left by an earlier version under the old name is stale: never
	// returned, so the new cache does not depend on guessable names.
	old := guesses[0]
	if err := os.MkdirAll(filepath.Join(dir, legacyDir, old[:2]), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := Marshal(Entry{Descriptor: []float32{9, 9}})
	if err := os.WriteFile(filepath.Join(dir, legacyDir, old[:2], old+".vdc"), stale, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(t.TempDir(), settings)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fresh.Get(old); ok {
		t.Error("an unkeyed name is still looked up")
	}
	if e, ok := c.Get(k); !ok || e.Descriptor[0] != 0.1 {
		t.Errorf("the keyed entry was shadowed by the stale one: %+v %v", e, ok)
	}
}

func TestTwoInstallsNameDifferently(t *testing.T) {
	a, err := Open(t.TempDir(), "s")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.TempDir(), "s")
	if err != nil {
		t.Fatal(err)
	}
	img := []byte("photo")
	if a.Key(img) == b.Key(img) {
		t.Fatal("two installs give the same entry name")
	}
	if string(a.key) == string(b.key) {
		t.Fatal("two installs share a key")
	}
}

func TestConcurrentFirstOpenAgreesOnKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "cache")
	const n = 8
	names := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := Open(dir, "s")
			if err != nil {
				errs[i] = err
				return
			}
			names[i] = c.Key([]byte("photo"))
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("open %d: %v", i, errs[i])
		}
		if names[i] != names[0] {
			t.Fatalf("open %d named the photo %s, open 0 %s: two keys were made", i, names[i], names[0])
		}
	}
}

func TestBadKeyFileIsAClearError(t *testing.T) {
	tests := []struct {
		name    string
		content []byte
		mode    os.FileMode
		want    string
	}{
		{"short", make([]byte, 7), 0o600, "damaged"},
		{"empty", nil, 0o600, "damaged"},
		{"long", make([]byte, 33), 0o600, "damaged"},
		{"zero", make([]byte, KeySize), 0o600, "all zero"},
		{"readable by others", []byte(strings.Repeat("k", KeySize)), 0o644, "other users"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, keyFile)
			if err := os.WriteFile(p, tc.content, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, "s")
			if err == nil {
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "remove the cache folder") {
				t.Errorf("error %q does not say %q and how to recover", err, tc.want)
			}
		})
	}
	// A folder where the key should be is refused too.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, keyFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "s"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("key is a folder: %v", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add(Marshal(Entry{Descriptor: []float32{1, 2, 3}}))
	f.Add(Marshal(Entry{Fallback: true}))
	f.Add(Marshal(Entry{Descriptor: []float32{-1}, LowScore: true, SecondDetector: true}))
	f.Add([]byte("VDC1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Unmarshal(b)
		if err != nil {
			return
		}
		again, err := Unmarshal(Marshal(e))
		if err != nil || len(again.Descriptor) != len(e.Descriptor) || again.Fallback != e.Fallback || again.LowScore != e.LowScore || again.SecondDetector != e.SecondDetector {
			t.Fatalf("round trip changed the entry: %v", err)
		}
	})
}

// FuzzReadKey feeds arbitrary key files: each is either refused or read as
// exactly KeySize non-zero bytes equal to the file.
func FuzzReadKey(f *testing.F) {
	f.Add([]byte(strings.Repeat("k", KeySize)))
	f.Add(make([]byte, KeySize))
	f.Add([]byte("short"))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, keyFile)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		key, err := readKey(p)
		if err != nil {
			return
		}
		if len(key) != KeySize || string(key) != string(b) || string(key) == string(make([]byte, KeySize)) {
			t.Fatalf("accepted key %x from file %x", key, b)
		}
	})
}
