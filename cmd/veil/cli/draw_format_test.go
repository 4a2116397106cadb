package cli

import (
	"bytes"
	"image/jpeg"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

// TestDetectDrawWritesTheFormatItsNameSays: --draw one.jpg wrote PNG bytes
// under a .jpg name. It now writes JPEG for .jpg and .jpeg, PNG for .png,
// and refuses any other extension before running the networks.
func TestDetectDrawWritesTheFormatItsNameSays(t *testing.T) {
	img := datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg")
	models := datadir.ModelDirForTest(t)
	dir := t.TempDir()
	for _, name := range []string{"one.jpg", "two.JPEG", "three.png"} {
		out := filepath.Join(dir, name)
		if code, _, errs := run(t, "detect", "--models", models, "--detector", "tiny", "--no-age-gender", "--quiet", "--draw", out, img); code != 0 {
			t.Fatalf("--draw %s: exit %d: %s", name, code, errs)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		isJPEG := bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF})
		isPNG := bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n"))
		if wantJPEG := !strings.HasSuffix(name, ".png"); isJPEG != wantJPEG || isPNG == wantJPEG {
			t.Errorf("--draw %s: JPEG %v, PNG %v", name, isJPEG, isPNG)
		}
		if isJPEG {
			m, err := jpeg.Decode(bytes.NewReader(b))
			if err != nil || m.Bounds().Dx() != 1920 {
				t.Errorf("--draw %s: %v", name, err)
			}
		}
	}
	for _, tc := range []struct{ name, want string }{
		{"one.gif", "cannot write .gif images"},
		{"noext", "no extension"},
	} {
		out := filepath.Join(dir, tc.name)
		mustFail(t, tc.want, "detect", "--models", models, "--draw", out, img)
		if _, err := os.Stat(out); err == nil {
			t.Errorf("--draw %s: a file was written", tc.name)
		}
	}
}
