package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/tagging"
)

// addThumbFaces records a photo whose faces have real JPEG thumbnails (each
// cut from a photo of one flat colour, colours[k]) and returns the face ids.
func addThumbFaces(t *testing.T, dir, path string, colours [][3]uint8) []int64 {
	t.Helper()
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var faces []tagging.NewFace
	for _, c := range colours {
		photo := imaging.NewRGB(200, 200)
		for i := 0; i < len(photo.Pix); i += 3 {
			photo.Pix[i], photo.Pix[i+1], photo.Pix[i+2] = c[0], c[1], c[2]
		}
		box := tagging.Box{X: 60, Y: 60, Width: 60, Height: 60}
		thumb, err := tagging.Thumbnail(photo, box)
		if err != nil {
			t.Fatal(err)
		}
		faces = append(faces, tagging.NewFace{Box: box, Score: 0.9, Source: tagging.Detected,
			Descriptor: make([]float32, 128), Thumbnail: thumb})
	}
	_, ids, err := l.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1,
		Width: 200, Height: 200}, faces)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// readSheet decodes the PNG at path.
func readSheet(t *testing.T, path string) image.Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s does not decode as PNG: %v", path, err)
	}
	return img
}

func TestFacesShow(t *testing.T) {
	dir := initTestLibrary(t)
	colours := [][3]uint8{{220, 30, 30}, {30, 200, 40}, {40, 50, 230}}
	ids := addThumbFaces(t, dir, "/photos/a.jpg", colours)
	out := filepath.Join(t.TempDir(), "sheet.png")
	args := []string{"faces", "show", "--library", dir, "--out", out}
	for _, id := range ids {
		args = append(args, fmt.Sprint(id))
	}
	code, stdout, errs := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "wrote "+out+": 3 faces") {
		t.Errorf("stdout %q", stdout)
	}
	sheet := readSheet(t, out)
	// One tile per face, in one row: the sheet is three cells wide, and
	// each cell's middle has the colour of its face's thumbnail (JPEG:
	// within 12 levels).
	o := imaging.DefaultSheetOptions()
	cellW := tagging.ThumbSize + 2*o.Padding
	if b := sheet.Bounds(); b.Dx() != 3*cellW {
		t.Fatalf("sheet is %d wide, want 3 cells of %d", b.Dx(), cellW)
	}
	near := func(a uint32, b uint8) bool { d := int(a>>8) - int(b); return d > -12 && d < 12 }
	for k, c := range colours {
		r, g, b, _ := sheet.At(k*cellW+cellW/2, o.Padding+tagging.ThumbSize/2).RGBA()
		if !near(r, c[0]) || !near(g, c[1]) || !near(b, c[2]) {
			t.Errorf("tile %d: colour %d,%d,%d, want about %v", k, r>>8, g>>8, b>>8, c)
		}
	}
	// Each id is drawn under its tile and reads back.
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rgb, _, err := imaging.Decode(b, imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	for k, id := range ids {
		w, _ := imaging.LabelSize(int(id), o.TextScale)
		n, ok := rgb.ReadLabel(k*cellW+(cellW-w)/2, 2*o.Padding+tagging.ThumbSize, o.TextScale, len(fmt.Sprint(id)))
		if !ok || int64(n) != id {
			t.Errorf("tile %d: label reads %d (ok %v), want face id %d", k, n, ok, id)
		}
	}

	// --person and --cluster select the same way.
	if code, _, errs := run(t, "faces", "name", fmt.Sprint(ids[1]), "--person", "Ada", "--library", dir); code != 0 {
		t.Fatal(errs)
	}
	code, stdout, errs = run(t, "faces", "show", "--person", "Ada", "--library", dir, "--out", out)
	if code != 0 || !strings.Contains(stdout, ": 1 face\n") {
		t.Fatalf("--person: exit %d, %q %q", code, stdout, errs)
	}
	if b := readSheet(t, out).Bounds(); b.Dx() != cellW {
		t.Errorf("--person: sheet %d wide, want one cell", b.Dx())
	}
	if code, _, errs := run(t, "faces", "clusters", "--library", dir, "--json"); code != 0 {
		t.Fatal(errs)
	}
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	of, err := l.StoredClusters()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := of[ids[0]]
	code, stdout, errs = run(t, "faces", "show", "--cluster", fmt.Sprint(c), "--library", dir, "--out", out, "--json", "--limit", "1")
	var js struct {
		Out      string  `json:"out"`
		Faces    []int64 `json:"faces"`
		Selected int     `json:"selected"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &js) != nil {
		t.Fatalf("--cluster --json: exit %d, %q %q", code, stdout, errs)
	}
	var inCluster int
	for _, k := range of {
		if k == c {
			inCluster++
		}
	}
	if js.Out != out || len(js.Faces) != 1 || js.Faces[0] != ids[0] || js.Selected != inCluster {
		t.Errorf("--cluster --json --limit 1: %+v, want face %d of %d", js, ids[0], inCluster)
	}

	mustFail(t, "say which faces to show", "faces", "show", "--library", dir)
	mustFail(t, "say which faces to show", "faces", "show", "1", "--person", "Ada", "--library", dir)
	mustFail(t, "no cluster 99", "faces", "show", "--cluster", "99", "--library", dir)
	mustFail(t, "no such face", "faces", "show", "999", "--library", dir, "--out", out)
	mustFail(t, "not a face id", "faces", "show", "x", "--library", dir)
	mustFail(t, "--out: sheet.gif: cannot write .gif images", "faces", "show", "1", "--library", dir, "--out", "sheet.gif")
}
