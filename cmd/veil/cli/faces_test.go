package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(args, strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func encodePNG(t *testing.T, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// hugePNG is a valid PNG header announcing width×height pixels: a
// decompression bomb that must be refused before any pixel is decoded.
func hugePNG(t *testing.T, w, h uint32) []byte {
	b := encodePNG(t, image.NewGray(image.Rect(0, 0, 1, 1)))
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// TestBadInputsGiveClearErrors feeds `veil detect` and `veil embed` the
// inputs a user will get wrong and checks each gives a specific message and
// the documented exit status, never a panic.
func TestBadInputsGiveClearErrors(t *testing.T) {
	dir := t.TempDir()
	sample, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	faceImg, err := jpeg.Decode(bytes.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	// An RGBA PNG with a transparent border and a greyscale PNG of the same photo.
	rgba := image.NewNRGBA(faceImg.Bounds())
	grey := image.NewGray(faceImg.Bounds())
	for y := faceImg.Bounds().Min.Y; y < faceImg.Bounds().Max.Y; y++ {
		for x := faceImg.Bounds().Min.X; x < faceImg.Bounds().Max.X; x++ {
			c := color.NRGBAModel.Convert(faceImg.At(x, y)).(color.NRGBA)
			if x < 20 {
				c.A = 0
			}
			rgba.SetNRGBA(x, y, c)
			grey.Set(x, y, faceImg.At(x, y))
		}
	}
	blank := image.NewRGBA(image.Rect(0, 0, 320, 240))
	for i := range blank.Pix {
		blank.Pix[i] = 128
	}
	files := map[string]string{
		"corrupt": writeFile(t, dir, "corrupt.jpg", append(append([]byte{}, sample[:len(sample)/3]...), bytes.Repeat([]byte{0x17}, 5000)...)),
		"empty":   writeFile(t, dir, "empty.jpg", nil),
		"alpha":   writeFile(t, dir, "alpha.png", encodePNG(t, rgba)),
		"grey":    writeFile(t, dir, "grey.png", encodePNG(t, grey)),
		"bomb":    writeFile(t, dir, "bomb.png", hugePNG(t, 20000, 20000)),
		"noface":  writeFile(t, dir, "noface.png", encodePNG(t, blank)),
		"text":    writeFile(t, dir, "notes.jpg", []byte("these are not pixels")),
	}
	models := datadir.ModelDirForTest(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		stderr   []string
		minFaces int
	}{
		{"corrupt jpeg", []string{"detect", "--models", models, files["corrupt"]}, exitFailed, []string{"corrupt.jpg", "JPEG"}, 0},
		{"empty file", []string{"detect", "--models", models, files["empty"]}, exitFailed, []string{"empty.jpg", "empty"}, 0},
		{"not an image", []string{"detect", "--models", models, files["text"]}, exitFailed, []string{"notes.jpg", "not a JPEG or PNG"}, 0},
		{"bomb", []string{"detect", "--models", models, files["bomb"]}, exitFailed, []string{"bomb.png", "20000"}, 0},
		{"missing file", []string{"detect", "--models", models, filepath.Join(dir, "nope.jpg")}, exitFailed, []string{"nope.jpg"}, 0},
		{"png with alpha", []string{"detect", "--models", models, files["alpha"]}, 0, nil, 3},
		{"greyscale", []string{"detect", "--models", models, files["grey"]}, 0, nil, 3},
		{"no face: detect", []string{"detect", "--models", models, files["noface"]}, 0, []string{"noface.png: no face found"}, 0},
		{"no face: embed", []string{"embed", "--models", models, files["noface"]}, exitNoFace, []string{"noface.png: no face found"}, 0},
		{"bad detector", []string{"detect", "--models", models, "--detector", "yolo", files["grey"]}, 1, []string{`--detector must be both, ssd or tiny, got "yolo"`}, 0},
		{"no args", []string{"detect"}, 1, []string{"veil: detect needs at least one photo", "veil detect --help"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, append(tc.args, "--json")...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, errOut)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr %q does not mention %q", errOut, s)
				}
			}
			if strings.Contains(errOut, "panic") || strings.Contains(errOut, "goroutine ") {
				t.Fatalf("panic: %s", errOut)
			}
			if tc.minFaces > 0 {
				var doc struct {
					Images []imageResult `json:"images"`
				}
				if err := json.Unmarshal([]byte(out), &doc); err != nil {
					t.Fatal(err)
				}
				if n := len(doc.Images[0].Faces); n < tc.minFaces {
					t.Fatalf("%d faces, want at least %d", n, tc.minFaces)
				}
			}
		})
	}
}

// TestMissingModelFile removes one weight file from a copy of the model
// folder: the error names the file and says how to install the models.
func TestMissingModelFile(t *testing.T) {
	src := datadir.ModelDirForTest(t)
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "face_recognition_model.bin" {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	img := datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg")
	code, _, errOut := run(t, "embed", "--models", dst, img)
	if code == 0 || !strings.Contains(errOut, "face_recognition_model.bin") || !strings.Contains(errOut, "install-models.sh") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// A modified file is refused by its checksum.
	if err := os.WriteFile(filepath.Join(dst, "face_recognition_model.bin"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "embed", "--models", dst, img)
	if code == 0 || !strings.Contains(errOut, "sha256") {
		t.Fatalf("tampered model: exit %d, stderr %q", code, errOut)
	}
	_ = nets.InstallHint
}

func TestDetectJSONAndDraw(t *testing.T) {
	img := datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg")
	out := filepath.Join(t.TempDir(), "drawn.png")
	code, stdout, errOut := run(t, "detect", "--models", datadir.ModelDirForTest(t), "--json", "--draw", out, img)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Images []struct {
			Path   string `json:"path"`
			Width  int    `json:"width"`
			Height int    `json:"height"`
			Faces  []struct {
				Box struct {
					X, Y, Width, Height float64
				} `json:"box"`
				Score     float64      `json:"score"`
				Landmarks [][2]float64 `json:"landmarks"`
				Age       *float64     `json:"age"`
				Gender    string       `json:"gender"`
			} `json:"faces"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	im := doc.Images[0]
	if im.Width != 1920 || im.Height != 1280 || len(im.Faces) != 3 {
		t.Fatalf("got %+v", im)
	}
	for _, f := range im.Faces {
		if len(f.Landmarks) != 68 || f.Age == nil || (f.Gender != "male" && f.Gender != "female") || f.Score < 0.5 {
			t.Fatalf("incomplete face %+v", f)
		}
	}
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	drawn, err := png.Decode(fh)
	if err != nil {
		t.Fatal(err)
	}
	if drawn.Bounds().Dx() != 1920 {
		t.Fatalf("drawn image is %v", drawn.Bounds())
	}
	// The box's top-left corner is painted green.
	b := im.Faces[0].Box
	r, g, bl, _ := drawn.At(int(b.X+0.5), int(b.Y+0.5)).RGBA()
	if g>>8 < 200 || r>>8 > 60 || bl>>8 > 60 {
		t.Fatalf("box corner colour %d,%d,%d is not the drawing green", r>>8, g>>8, bl>>8)
	}
}

// TestErrorsNameFileOnce: an error about an input names the file once, on
// stderr and in the JSON (the issue saw "veil: text.jpg: text.jpg: imaging: …").
func TestErrorsNameFileOnce(t *testing.T) {
	dir := t.TempDir()
	text := writeFile(t, dir, "text.jpg", []byte("these are not pixels"))
	missing := filepath.Join(dir, "missing.jpg")
	models := datadir.ModelDirForTest(t)
	for _, cmd := range []string{"detect", "embed"} {
		for _, path := range []string{text, missing} {
			name := filepath.Base(path)
			t.Run(cmd+" "+name, func(t *testing.T) {
				code, _, errOut := run(t, cmd, "--models", models, "--detector", "tiny", path)
				if code != exitFailed {
					t.Fatalf("exit %d, want %d; stderr %q", code, exitFailed, errOut)
				}
				var line string
				for _, l := range strings.Split(errOut, "\n") {
					if strings.Contains(l, name) {
						line = l
					}
				}
				if n := strings.Count(line, name); n != 1 {
					t.Errorf("stderr line names %s %d times: %q", name, n, line)
				}
				code, out, _ := run(t, cmd, "--models", models, "--detector", "tiny", "--json", path)
				var doc struct {
					Images []imageResult `json:"images"`
				}
				if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitFailed || len(doc.Images) != 1 {
					t.Fatalf("exit %d, JSON %q: %v", code, out, err)
				}
				if n := strings.Count(doc.Images[0].Error, name); n != 1 {
					t.Errorf("JSON error names %s %d times: %q", name, n, doc.Images[0].Error)
				}
			})
		}
	}
}

// TestDetectFindsWhatSSDMisses: the photos. LFW George_W_Bush_0011
// (SSD scores the face 0.356, as face-api does) and a greyscale copy of
// George_W_Bush_0001 (0.928 in colour, 0.050 in grey) have no face for SSD
// alone at 0.5; detect and embed find the face by default (--detector
// both), where --detector ssd still finds none.
func TestDetectFindsWhatSSDMisses(t *testing.T) {
	lfw := func(n string) string {
		return datadir.ForTest(t, "lfw", "images_deepfunneled", "George_W_Bush", "George_W_Bush_"+n+".jpg")
	}
	img, _, err := imaging.DecodeFile(lfw("0001"), imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	grey := writeFile(t, t.TempDir(), "bush1-grey.png", encodePNG(t, img.Grey().Image()))
	models := datadir.ModelDirForTest(t)
	for _, path := range []string{lfw("0011"), grey} {
		for _, cmd := range []string{"detect", "embed"} {
			t.Run(cmd+" "+filepath.Base(path), func(t *testing.T) {
				code, out, errOut := run(t, cmd, "--models", models, "--json", path)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				var doc struct {
					Images []struct {
						Faces []jsonFace `json:"faces"`
					} `json:"images"`
				}
				if err := json.Unmarshal([]byte(out), &doc); err != nil {
					t.Fatal(err)
				}
				fs := doc.Images[0].Faces
				if len(fs) == 0 {
					t.Fatal("no face found")
				}
				b := fs[0].Box
				if !(b.X < 125 && b.X+b.Width > 125 && b.Y < 125 && b.Y+b.Height > 125) || fs[0].SSDScore == nil || fs[0].TinyScore == nil {
					t.Errorf("first face %+v: want the central face with both networks' scores", fs[0])
				}
				if cmd == "embed" && len(fs[0].Descriptor) != 128 {
					t.Errorf("descriptor of %d values", len(fs[0].Descriptor))
				}
			})
		}
		code, out, _ := run(t, "detect", "--models", models, "--detector", "ssd", "--json", path)
		if code != 0 || !strings.Contains(out, `"faces": []`) {
			t.Errorf("--detector ssd on %s: exit %d, want no face (the issue's miss); got %.200s", path, code, out)
		}
	}
}
