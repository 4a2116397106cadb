package tagging

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree makes files (path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("symbolic links unavailable: %v", err)
	}
}

func TestScan(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "photos")
	outside := filepath.Join(dir, "elsewhere")
	writeTree(t, root, map[string]string{
		"a.jpg":             "x",
		"B.JPEG":            "x",
		"c.png":             "x",
		"notes.txt":         "x",
		"raw.cr2":           "x",
		"phone.HEIC":        "x",
		"sub/deep/d.jpe":    "x",
		".hidden/e.jpg":     "x",
		"sub/.f.jpg":        "x",
		"sub/g.jfif":        "x",
		"dir.jpg/inner.jpg": "x", // a folder named like a photo is walked
	})
	writeTree(t, outside, map[string]string{"h.jpg": "x", "more/i.png": "x"})
	symlink(t, "..", filepath.Join(root, "sub", "deep", "loop")) // loop to an ancestor
	symlink(t, root, filepath.Join(root, "sub", "again"))        // loop to the root
	symlink(t, outside, filepath.Join(root, "linked"))           // a folder elsewhere
	symlink(t, outside, filepath.Join(root, "linked-twice"))     // the same folder again
	symlink(t, filepath.Join(root, "a.jpg"), filepath.Join(root, "z-alias.jpg"))
	symlink(t, filepath.Join(dir, "gone.jpg"), filepath.Join(root, "broken.jpg"))

	res, err := Scan(context.Background(), []string{root})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Files {
		if !filepath.IsAbs(f) {
			t.Errorf("%s is not absolute", f)
		}
		rel, _ := filepath.Rel(root, f)
		got = append(got, filepath.ToSlash(rel))
	}
	want := []string{"B.JPEG", "a.jpg", "c.png", "dir.jpg/inner.jpg", "linked/h.jpg", "linked/more/i.png",
		"sub/deep/d.jpe", "sub/g.jfif", "z-alias.jpg"}
	if !slices.Equal(got, want) {
		t.Errorf("files\n got %q\nwant %q", got, want)
	}
	var errPaths []string
	for _, e := range res.Errors {
		rel, _ := filepath.Rel(root, e.Path)
		errPaths = append(errPaths, rel+": "+e.Err)
	}
	slices.Sort(errPaths)
	wantErr := []string{"broken.jpg: broken symbolic link: no such file or directory", "phone.HEIC: HEIC photos are not supported (JPEG and PNG are)"}
	if !slices.Equal(errPaths, wantErr) {
		t.Errorf("errors\n got %q\nwant %q", errPaths, wantErr)
	}
}

func TestScanRoots(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a/x.jpg": "x", "b/y.png": "x", "odd-name.dat": "x"})
	// A file given by name is taken whatever its name; a folder given
	// twice, or inside another root, is listed once.
	res, err := Scan(context.Background(), []string{filepath.Join(dir, "odd-name.dat"), filepath.Join(dir, "a"), dir, filepath.Join(dir, "a", "x.jpg")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Files {
		got = append(got, filepath.Base(f))
	}
	if want := []string{"odd-name.dat", "x.jpg", "y.png"}; !slices.Equal(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
	if len(res.Errors) != 0 {
		t.Errorf("errors %v", res.Errors)
	}
	// A root that does not exist is an error naming it.
	_, err = Scan(context.Background(), []string{dir, filepath.Join(dir, "nope")})
	if err == nil || !strings.Contains(err.Error(), "nope") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing root: %v", err)
	}
	// Cancellation stops the walk.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Scan(ctx, []string{dir}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled scan: %v", err)
	}
}

func TestReadContent(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a": "hello", "big": strings.Repeat("x", 100)})
	c, err := ReadContent(filepath.Join(dir, "a"), 10)
	if err != nil {
		t.Fatal(err)
	}
	// sha256("hello")
	if got := strings.ToLower(hexString(c.SHA256[:])); got != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" || c.Size != 5 || string(c.Data) != "hello" {
		t.Errorf("content %s %d %q", got, c.Size, c.Data)
	}
	if _, err := ReadContent(filepath.Join(dir, "big"), 10); err == nil || !strings.Contains(err.Error(), "over the 10-byte limit") {
		t.Errorf("big file: %v", err)
	}
	if _, err := ReadContent(dir, 10); err == nil {
		t.Error("a folder was read as a photo")
	}
	if _, err := ReadContent(filepath.Join(dir, "none"), 10); !errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), dir) {
		t.Errorf("missing file: %v (want a reason without the path)", err)
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, v := range b {
		out[2*i], out[2*i+1] = digits[v>>4], digits[v&15]
	}
	return string(out)
}
