package imaging

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

type pixelRef struct {
	File   string `json:"file"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	SHA256 string `json:"rgb_sha256"`
}

func loadPixelRefs(t testing.TB) []pixelRef {
	t.Helper()
	raw, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "pixels.json"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []pixelRef
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 {
		t.Fatal("pixels.json lists no images")
	}
	return refs
}

// TestDecodeMatchesReference checks the decoded RGB bytes of the face-api
// demo images against the sha256 recorded with Go's image/jpeg.
func TestDecodeMatchesReference(t *testing.T) {
	for _, ref := range loadPixelRefs(t) {
		t.Run(ref.File, func(t *testing.T) {
			m, info, err := DecodeFile(datadir.ForTest(t, "faceapi-reference", "images", ref.File), DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if m.W != ref.Width || m.H != ref.Height {
				t.Fatalf("size %d×%d, want %d×%d", m.W, m.H, ref.Width, ref.Height)
			}
			sum := sha256.Sum256(m.Pix)
			if got := hex.EncodeToString(sum[:]); got != ref.SHA256 {
				t.Errorf("rgb sha256 %s, want %s", got, ref.SHA256)
			}
			if info.Format != "jpeg" || info.Orientation != 1 || info.HadAlpha || info.Grey || info.OrigW != m.W || info.OrigH != m.H {
				t.Errorf("info %+v", info)
			}
		})
	}
}

// TestYCbCrMatchesStdlib checks the inlined conversion against
// color.YCbCrToRGB on all 2^24 inputs, through every subsampling ratio.
func TestYCbCrMatchesStdlib(t *testing.T) {
	// 256 (Y) × 65536 (Cb,Cr) image: Y varies along x, chroma along y in
	// full-resolution (4:4:4) layout.
	src := image.NewYCbCr(image.Rect(0, 0, 256, 65536), image.YCbCrSubsampleRatio444)
	for y := 0; y < 65536; y++ {
		for x := 0; x < 256; x++ {
			src.Y[y*src.YStride+x] = uint8(x)
			src.Cb[y*src.CStride+x] = uint8(y >> 8)
			src.Cr[y*src.CStride+x] = uint8(y)
		}
	}
	m := NewRGB(256, 65536)
	ycbcrToRGB(src, m)
	for y := 0; y < 65536; y++ {
		for x := 0; x < 256; x++ {
			r, g, b := color.YCbCrToRGB(uint8(x), uint8(y>>8), uint8(y))
			i := 3 * (y*256 + x)
			if m.Pix[i] != r || m.Pix[i+1] != g || m.Pix[i+2] != b {
				t.Fatalf("Y=%d Cb=%d Cr=%d: got %v, want %d %d %d", x, y>>8, y&255, m.Pix[i:i+3], r, g, b)
			}
		}
	}
}

// TestYCbCrSubsampling checks the fast path against image.YCbCr.At for every
// subsampling ratio, including a sub-image with an odd origin.
func TestYCbCrSubsampling(t *testing.T) {
	ratios := []image.YCbCrSubsampleRatio{
		image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420,
		image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410,
	}
	for _, ratio := range ratios {
		t.Run(ratio.String(), func(t *testing.T) {
			full := image.NewYCbCr(image.Rect(0, 0, 37, 23), ratio)
			for i := range full.Y {
				full.Y[i] = uint8(i * 7)
			}
			for i := range full.Cb {
				full.Cb[i] = uint8(i*13 + 5)
				full.Cr[i] = uint8(i*29 + 101)
			}
			for _, img := range []*image.YCbCr{full, full.SubImage(image.Rect(3, 5, 30, 20)).(*image.YCbCr)} {
				m, _, _ := toRGB(img)
				b := img.Bounds()
				for y := 0; y < b.Dy(); y++ {
					for x := 0; x < b.Dx(); x++ {
						want := color.RGBAModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.RGBA)
						r, g, bb := m.At(x, y)
						if r != want.R || g != want.G || bb != want.B {
							t.Fatalf("bounds %v (%d,%d): got %d %d %d want %v", b, x, y, r, g, bb, want)
						}
					}
				}
			}
		})
	}
}

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodeJPEG(t testing.TB, img image.Image, q int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// patchPNGSize rewrites the IHDR width and height and recomputes its CRC.
func patchPNGSize(t testing.TB, data []byte, w, h uint32) []byte {
	t.Helper()
	out := bytes.Clone(data)
	// Signature (8) + length (4) + "IHDR" (4) + data (13) + CRC (4).
	if string(out[12:16]) != "IHDR" {
		t.Fatal("no IHDR chunk first")
	}
	binary.BigEndian.PutUint32(out[16:], w)
	binary.BigEndian.PutUint32(out[20:], h)
	binary.BigEndian.PutUint32(out[29:], crc32.ChecksumIEEE(out[12:29]))
	return out
}

func TestDecodeFormats(t *testing.T) {
	rect := image.Rect(0, 0, 4, 3)
	nrgba := image.NewNRGBA(rect)
	gray := image.NewGray(rect)
	gray16 := image.NewGray16(rect)
	rgba64 := image.NewRGBA64(rect)
	nrgba64 := image.NewNRGBA64(rect)
	pal := image.NewPaletted(rect, color.Palette{color.RGBA{10, 20, 30, 255}, color.NRGBA{200, 100, 50, 128}, color.RGBA{1, 2, 3, 255}})
	for y := 0; y < 3; y++ {
		for x := 0; x < 4; x++ {
			v := uint8(20*x + 60*y)
			nrgba.SetNRGBA(x, y, color.NRGBA{v, v + 1, v + 2, uint8(40 * x)}) // x=0: fully transparent
			gray.SetGray(x, y, color.Gray{v})
			gray16.SetGray16(x, y, color.Gray16{uint16(v)<<8 | 0xAB})
			rgba64.SetRGBA64(x, y, color.RGBA64{uint16(v) << 8, uint16(v+1)<<8 | 0x7F, uint16(v+2) << 8, 0xFFFF})
			nrgba64.SetNRGBA64(x, y, color.NRGBA64{uint16(v)<<8 | 0xFF, uint16(v+1) << 8, uint16(v+2) << 8, 0x8000})
			pal.SetColorIndex(x, y, uint8((x+y)%3))
		}
	}
	// Expected colour at (x, y) for each source.
	vv := func(x, y int) uint8 { return uint8(20*x + 60*y) }
	tests := []struct {
		name        string
		data        []byte
		want        func(x, y int) [3]uint8
		alpha, grey bool
	}{
		{"png-nrgba-straight-colour-kept", encodePNG(t, nrgba), func(x, y int) [3]uint8 { v := vv(x, y); return [3]uint8{v, v + 1, v + 2} }, true, false},
		{"png-grey8", encodePNG(t, gray), func(x, y int) [3]uint8 { v := vv(x, y); return [3]uint8{v, v, v} }, false, true},
		{"png-grey16-high-byte", encodePNG(t, gray16), func(x, y int) [3]uint8 { v := vv(x, y); return [3]uint8{v, v, v} }, false, true},
		{"png-rgb16-high-byte", encodePNG(t, rgba64), func(x, y int) [3]uint8 { v := vv(x, y); return [3]uint8{v, v + 1, v + 2} }, false, false},
		{"png-rgba16-straight", encodePNG(t, nrgba64), func(x, y int) [3]uint8 { v := vv(x, y); return [3]uint8{v, v + 1, v + 2} }, true, false},
		{"png-paletted-trns", encodePNG(t, pal), func(x, y int) [3]uint8 {
			return [][3]uint8{{10, 20, 30}, {200, 100, 50}, {1, 2, 3}}[(x+y)%3]
		}, true, false},
		{"jpeg-grey", encodeJPEG(t, gray, 100), nil, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, info, err := Decode(tc.data, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if m.W != 4 || m.H != 3 || len(m.Pix) != 36 {
				t.Fatalf("size %d×%d (%d bytes)", m.W, m.H, len(m.Pix))
			}
			if info.HadAlpha != tc.alpha || info.Grey != tc.grey {
				t.Errorf("info %+v, want HadAlpha=%v Grey=%v", info, tc.alpha, tc.grey)
			}
			for y := 0; y < 3; y++ {
				for x := 0; x < 4; x++ {
					r, g, b := m.At(x, y)
					if tc.want == nil { // lossy JPEG: grey replicated, close to source
						v := int(vv(x, y))
						if r != g || g != b || abs(int(r)-v) > 3 {
							t.Errorf("(%d,%d) = %d %d %d, want grey ≈%d", x, y, r, g, b, v)
						}
						continue
					}
					if w := tc.want(x, y); [3]uint8{r, g, b} != w {
						t.Errorf("(%d,%d) = %d %d %d, want %v", x, y, r, g, b, w)
					}
				}
			}
		})
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func TestDecodeErrors(t *testing.T) {
	small := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for i := range small.Pix {
		small.Pix[i] = uint8(i)
	}
	jpg := encodeJPEG(t, small, 90)
	noise := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for i := range noise.Pix {
		noise.Pix[i] = uint8(i * 2654435761 >> 13)
	}
	big := encodeJPEG(t, noise, 95)
	pngData := encodePNG(t, small)
	tests := []struct {
		name    string
		data    []byte
		lim     Limits
		want    error
		mention []string
	}{
		{"empty", nil, DefaultLimits(), ErrEmpty, nil},
		{"text", []byte("hello, this is not an image"), DefaultLimits(), ErrFormat, []string{"not a JPEG or PNG"}},
		{"gif", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"), DefaultLimits(), ErrFormat, []string{"not a JPEG or PNG"}},
		{"jpeg-soi-only", []byte{0xFF, 0xD8, 0xFF}, DefaultLimits(), ErrFormat, []string{"jpeg header"}},
		{"jpeg-truncated-header", jpg[:40], DefaultLimits(), ErrFormat, []string{"jpeg header"}},
		{"jpeg-truncated-pixels", jpg[:len(jpg)-40], DefaultLimits(), ErrFormat, []string{"jpeg 16×16", "decoding pixels"}},
		{"jpeg-garbage-after-header", append(bytes.Clone(big[:len(big)/2]), bytes.Repeat([]byte{0xFF, 0x00, 0x13}, 50)...), DefaultLimits(), ErrFormat, []string{"jpeg 64×64", "decoding pixels"}},
		{"png-bad-crc", func() []byte { d := bytes.Clone(pngData); d[20] ^= 1; return d }(), DefaultLimits(), ErrFormat, []string{"png header"}},
		{"png-truncated", pngData[:len(pngData)-20], DefaultLimits(), ErrFormat, []string{"png 16×16", "decoding pixels"}},
		{"png-bomb-20000x20000", patchPNGSize(t, pngData, 20000, 20000), DefaultLimits(), ErrTooLarge, []string{"20000×20000", "400000000 pixels", "limit 50000000"}},
		{"jpeg-over-pixel-limit", jpg, Limits{MaxPixels: 255, MaxBytes: 1 << 20}, ErrTooLarge, []string{"16×16", "limit 255"}},
		{"over-byte-limit", jpg, Limits{MaxPixels: 1 << 20, MaxBytes: 100}, ErrTooLarge, []string{"limit 100"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _, err := Decode(tc.data, tc.lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if m != nil {
				t.Errorf("image returned with error")
			}
			for _, s := range tc.mention {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if _, _, err := Decode(jpg, Limits{}); err == nil || errors.Is(err, ErrFormat) {
		t.Errorf("zero Limits accepted: %v", err)
	}
}

// TestDecodeBombNoAllocation checks that a 20000×20000 header is refused
// without allocating anything near the 1.2 GB its pixels would take.
func TestDecodeBombNoAllocation(t *testing.T) {
	bomb := patchPNGSize(t, encodePNG(t, image.NewGray(image.Rect(0, 0, 8, 8))), 20000, 20000)
	allocs := testing.AllocsPerRun(5, func() {
		if _, _, err := Decode(bomb, DefaultLimits()); !errors.Is(err, ErrTooLarge) {
			t.Fatal(err)
		}
	})
	if allocs > 50 {
		t.Errorf("%.0f allocations refusing a bomb", allocs)
	}
	var before, after runtimeMem
	before.read()
	for i := 0; i < 5; i++ {
		_, _, _ = Decode(bomb, DefaultLimits())
	}
	after.read()
	if d := after.total - before.total; d > 1<<20 {
		t.Errorf("refusing a bomb 5 times allocated %d bytes", d)
	}
}

func TestDecodeFile(t *testing.T) {
	dir := t.TempDir()
	img := image.NewGray(image.Rect(0, 0, 5, 7))
	good := filepath.Join(dir, "good.png")
	if err := os.WriteFile(good, encodePNG(t, img), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jpg")
	if err := os.WriteFile(bad, []byte("not a picture"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.jpg")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, info, err := DecodeFile(good, DefaultLimits())
	if err != nil || m.W != 5 || m.H != 7 || info.Format != "png" || !info.Grey {
		t.Fatalf("good file: %v %+v", err, info)
	}
	tests := []struct {
		path string
		lim  Limits
		want error
	}{
		{bad, DefaultLimits(), ErrFormat},
		{empty, DefaultLimits(), ErrEmpty},
		{good, Limits{MaxPixels: 100, MaxBytes: 10}, ErrTooLarge},
		{filepath.Join(dir, "missing.png"), DefaultLimits(), os.ErrNotExist},
		{dir, DefaultLimits(), nil},
	}
	for _, tc := range tests {
		_, _, err := DecodeFile(tc.path, tc.lim)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: err = %v, want %v", tc.path, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: error %q does not name the file", tc.path, err)
		}
	}
}

// TestReadFile checks the file reading DecodeFile and the descriptor
// cache share: sizes are refused before reading, folders are refused, and
// errors name the file once.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jpg")
	if err := os.WriteFile(good, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := ReadFile(good, 10)
	if err != nil || string(data) != "0123456789" {
		t.Fatalf("ReadFile at the limit: %q, %v", data, err)
	}
	tests := []struct {
		path string
		max  int64
		is   error
		want string
	}{
		{good, 9, ErrTooLarge, "file is 10 bytes, limit 9"},
		{dir, 100, nil, "is a folder, not an image file"},
		{filepath.Join(dir, "missing.jpg"), 100, os.ErrNotExist, "cannot read "},
	}
	for _, tc := range tests {
		_, err := ReadFile(tc.path, tc.max)
		if err == nil {
			t.Errorf("%s (limit %d): no error", tc.path, tc.max)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v, want %v", tc.path, err, tc.is)
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), tc.path) != 1 {
			t.Errorf("%s: %q, want it to say %q and name the file once", tc.path, err, tc.want)
		}
	}
}
