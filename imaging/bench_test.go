package imaging

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"os"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

func readSample1(b *testing.B) []byte {
	data, err := os.ReadFile(datadir.ForTest(b, "faceapi-reference", "images", "sample1.jpg"))
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// photo1920x1080 returns sample1.jpg resized to 1920×1080 and re-encoded as
// a quality-90 JPEG.
func photo1920x1080(b *testing.B) []byte {
	m, _, err := Decode(readSample1(b), DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	r := ResizeBilinear(m.ToFloat(), 1920, 1080)
	img := image.NewRGBA(image.Rect(0, 0, 1920, 1080))
	for i, j := 0, 0; i < len(r.Pix); i, j = i+3, j+4 {
		img.Pix[j], img.Pix[j+1], img.Pix[j+2], img.Pix[j+3] = uint8(math.Round(float64(r.Pix[i]))), uint8(math.Round(float64(r.Pix[i+1]))), uint8(math.Round(float64(r.Pix[i+2]))), 255
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func benchDecode(b *testing.B, data []byte) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(data, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode measures Decode (header check, image/jpeg, fast RGB
// conversion); the Stdlib* benchmarks are baselines on the same bytes.
func BenchmarkDecode(b *testing.B) {
	b.Run("sample1-1920x1280", func(b *testing.B) { benchDecode(b, readSample1(b)) })
	b.Run("photo-1920x1080", func(b *testing.B) { benchDecode(b, photo1920x1080(b)) })
}

// BenchmarkStdlibJPEGOnly is image/jpeg alone: the floor for Decode.
func BenchmarkStdlibJPEGOnly(b *testing.B) {
	data := readSample1(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdlibJPEGPlusAt is image/jpeg followed by a per-pixel At()
// conversion: what the fast path replaces.
func BenchmarkStdlibJPEGPlusAt(b *testing.B) {
	data := readSample1(b)
	b.ReportAllocs()
	for b.Loop() {
		img, err := jpeg.Decode(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		r := img.Bounds()
		m := NewRGB(r.Dx(), r.Dy())
		for y := 0; y < r.Dy(); y++ {
			for x := 0; x < r.Dx(); x++ {
				c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
				i := 3 * (y*m.W + x)
				m.Pix[i], m.Pix[i+1], m.Pix[i+2] = c.R, c.G, c.B
			}
		}
	}
}

func BenchmarkResizeBilinear1920x1080To512(b *testing.B) {
	src := NewFloat(1920, 1080, 3)
	for i := range src.Pix {
		src.Pix[i] = float32(i % 251)
	}
	b.ReportAllocs()
	for b.Loop() {
		ResizeBilinear(src, 512, 512)
	}
}

func BenchmarkWarpAffineTo150(b *testing.B) {
	m, _, err := Decode(readSample1(b), DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	// A 213-px face rotated by 5° onto 150×150.
	a := similarity(213.0/150, 5*math.Pi/180, 369, 394)
	b.ReportAllocs()
	for b.Loop() {
		WarpAffine(m, a, 150, 150)
	}
}

// BenchmarkYCbCrToRGB is the colour conversion alone (sample1, 4:2:2).
func BenchmarkYCbCrToRGB(b *testing.B) {
	img, err := jpeg.Decode(bytes.NewReader(readSample1(b)))
	if err != nil {
		b.Fatal(err)
	}
	ycc := img.(*image.YCbCr)
	m := NewRGB(ycc.Rect.Dx(), ycc.Rect.Dy())
	b.ReportAllocs()
	for b.Loop() {
		ycbcrToRGB(ycc, m)
	}
}
