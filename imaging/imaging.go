// Package imaging decodes JPEG and PNG photos into 8-bit RGB, applies the
// EXIF orientation (ReadJPEGEXIF, which also reads when the photo was
// taken), and provides the geometric operations of the face
// pipeline: TensorFlow-compatible bilinear resize, padding to a square,
// cropping, similarity-transform estimation and affine warping, plus simple
// drawing for annotated output.
//
// Everything is pure Go (standard library only). Decoding guards against
// decompression bombs by reading the image header (DecodeConfig) before any
// pixel is decoded.
//
// Alpha: images with an alpha channel are accepted and the alpha is dropped,
// keeping the straight (non-premultiplied) colour values, as TF.js's
// tf.browser.fromPixels(img, 3) does. Fully transparent pixels therefore keep
// whatever colour the file stores for them. DecodeInfo.HadAlpha reports
// whether any pixel was not fully opaque.
package imaging

import (
	"errors"
	"fmt"
	"image"
	"image/color"
)

// Sentinel errors wrapped by Decode and DecodeFile.
var (
	// ErrEmpty reports zero bytes of input.
	ErrEmpty = errors.New("empty input")
	// ErrFormat reports input that is not a JPEG or PNG, or a corrupt one.
	ErrFormat = errors.New("unsupported or corrupt image")
	// ErrTooLarge reports an image or file beyond the configured Limits.
	ErrTooLarge = errors.New("image too large")
)

// RGB is an 8-bit RGB image, row-major, 3 bytes per pixel: the colour of
// pixel (x, y) is Pix[3*(y*W+x) : 3*(y*W+x)+3].
type RGB struct {
	W, H int
	Pix  []uint8
}

// NewRGB returns a black w×h image (negative sizes count as zero).
func NewRGB(w, h int) *RGB {
	w, h = max(w, 0), max(h, 0)
	return &RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)}
}

// At returns the colour of pixel (x, y), or black when (x, y) is outside the
// image.
func (m *RGB) At(x, y int) (r, g, b uint8) {
	if x < 0 || y < 0 || x >= m.W || y >= m.H {
		return 0, 0, 0
	}
	i := 3 * (y*m.W + x)
	return m.Pix[i], m.Pix[i+1], m.Pix[i+2]
}

// Set sets the colour of pixel (x, y); points outside the image are ignored.
func (m *RGB) Set(x, y int, r, g, b uint8) {
	if x < 0 || y < 0 || x >= m.W || y >= m.H {
		return
	}
	i := 3 * (y*m.W + x)
	m.Pix[i], m.Pix[i+1], m.Pix[i+2] = r, g, b
}

// Validate reports whether the image is well-formed (non-negative sizes and
// len(Pix) == 3·W·H).
func (m *RGB) Validate() error {
	if m == nil {
		return errors.New("imaging: nil RGB image")
	}
	if m.W < 0 || m.H < 0 || len(m.Pix) != 3*m.W*m.H {
		return fmt.Errorf("imaging: malformed RGB image: %d×%d with %d bytes (want %d)", m.W, m.H, len(m.Pix), 3*max(m.W, 0)*max(m.H, 0))
	}
	return nil
}

// Crop returns a copy of the sub-image [x0,x0+w)×[y0,y0+h), clipped to the
// image. It is an error if the clipped region is empty.
func (m *RGB) Crop(x0, y0, w, h int) (*RGB, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("imaging: crop %d×%d at (%d,%d): empty size", w, h, x0, y0)
	}
	r := image.Rect(x0, y0, x0+w, y0+h).Intersect(image.Rect(0, 0, m.W, m.H))
	if r.Empty() {
		return nil, fmt.Errorf("imaging: crop %d×%d at (%d,%d) lies outside the %d×%d image", w, h, x0, y0, m.W, m.H)
	}
	out := NewRGB(r.Dx(), r.Dy())
	for y := 0; y < out.H; y++ {
		s := 3 * ((r.Min.Y+y)*m.W + r.Min.X)
		copy(out.Pix[3*y*out.W:3*(y+1)*out.W], m.Pix[s:s+3*out.W])
	}
	return out, nil
}

// Image returns a view of m for other Go image code (image/png, image/draw).
// It shares m's pixels.
func (m *RGB) Image() image.Image { return rgbView{m} }

type rgbView struct{ m *RGB }

func (v rgbView) ColorModel() color.Model { return color.RGBAModel }
func (v rgbView) Bounds() image.Rectangle { return image.Rect(0, 0, v.m.W, v.m.H) }
func (v rgbView) At(x, y int) color.Color {
	if x < 0 || y < 0 || x >= v.m.W || y >= v.m.H {
		return color.RGBA{}
	}
	r, g, b := v.m.At(x, y)
	return color.RGBA{r, g, b, 255}
}

// Float is an HWC float32 tensor for the networks: the value of channel c at
// pixel (x, y) is Pix[(y*W+x)*C+c].
type Float struct {
	W, H, C int
	Pix     []float32
}

// NewFloat returns a zero w×h×c tensor (negative sizes count as zero).
func NewFloat(w, h, c int) *Float {
	w, h, c = max(w, 0), max(h, 0), max(c, 0)
	return &Float{W: w, H: h, C: c, Pix: make([]float32, w*h*c)}
}

// Validate reports whether the tensor is well-formed.
func (f *Float) Validate() error {
	if f == nil {
		return errors.New("imaging: nil Float tensor")
	}
	if f.W < 0 || f.H < 0 || f.C < 0 || len(f.Pix) != f.W*f.H*f.C {
		return fmt.Errorf("imaging: malformed Float tensor: %d×%d×%d with %d values", f.H, f.W, f.C, len(f.Pix))
	}
	return nil
}

// ToFloat converts to an HWC float32 tensor with C=3 and values 0..255.
func (m *RGB) ToFloat() *Float {
	f := &Float{W: m.W, H: m.H, C: 3, Pix: make([]float32, len(m.Pix))}
	for i, v := range m.Pix {
		f.Pix[i] = float32(v)
	}
	return f
}
