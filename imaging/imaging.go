// Package imaging decodes JPEG and PNG photos into 8-bit RGB, applies the
// EXIF orientation, and provides the geometric operations of the face
// pipeline: TensorFlow-compatible bilinear resize, padding to a square,
// cropping, similarity-transform estimation and affine warping, plus simple
// drawing for annotated output.
//
// Everything is pure Go. Decoding guards against decompression bombs by
// reading the image header (image.DecodeConfig) before any pixel is decoded.
package imaging

import (
	"errors"
	"image"
	"io"
)

// Sentinel errors wrapped by Decode and DecodeFile.
var (
	// ErrEmpty reports zero bytes of input.
	ErrEmpty = errors.New("imaging: empty input")
	// ErrFormat reports input that is not a JPEG or PNG, or a corrupt one.
	ErrFormat = errors.New("imaging: unsupported or corrupt image")
	// ErrTooLarge reports an image or file beyond the configured Limits.
	ErrTooLarge = errors.New("imaging: image too large")
)

var errTODO = errors.New("imaging: not implemented yet")

// RGB is an 8-bit RGB image, row-major, 3 bytes per pixel.
type RGB struct {
	W, H int
	Pix  []uint8
}

// NewRGB returns a black w×h image.
func NewRGB(w, h int) *RGB { return &RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)} }

// At returns the colour of pixel (x, y); it panics if out of range, like a
// slice index.
func (m *RGB) At(x, y int) (r, g, b uint8) {
	i := 3 * (y*m.W + x)
	return m.Pix[i], m.Pix[i+1], m.Pix[i+2]
}

// Limits bounds what Decode accepts.
type Limits struct {
	MaxPixels int64 // maximum width×height
	MaxBytes  int64 // maximum encoded size in bytes
}

// DefaultLimits returns 50 megapixels and 64 MiB.
func DefaultLimits() Limits { return Limits{MaxPixels: 50_000_000, MaxBytes: 64 << 20} }

// DecodeInfo describes a decoded image.
type DecodeInfo struct {
	Format      string // "jpeg" or "png"
	Orientation int    // EXIF orientation applied (1..8; 1 when absent)
	HadAlpha    bool   // the source had an alpha channel
	Grey        bool   // the source was greyscale
	OrigW       int    // width before orientation was applied
	OrigH       int    // height before orientation was applied
}

// Decode decodes JPEG or PNG bytes into RGB.
func Decode(data []byte, lim Limits) (*RGB, DecodeInfo, error) {
	return nil, DecodeInfo{}, errTODO
}

// DecodeFile reads and decodes an image file; errors name the file.
func DecodeFile(path string, lim Limits) (*RGB, DecodeInfo, error) {
	return nil, DecodeInfo{}, errTODO
}

// Float is an HWC float32 tensor for the networks.
type Float struct {
	W, H, C int
	Pix     []float32
}

// ToFloat converts to an HWC float32 tensor with values 0..255.
func (m *RGB) ToFloat() *Float { return nil }

// ResizeBilinear is TensorFlow's resizeBilinear (alignCorners=false,
// halfPixelCenters=false) as the TF.js cpu backend computes it.
func ResizeBilinear(src *Float, outW, outH int) *Float { return nil }

// PadToSquare zero-pads to a square as face-api does.
func PadToSquare(src *Float, centred bool) (out *Float, offX, offY int) { return nil, 0, 0 }

// Crop returns the sub-image [x0,x0+w)×[y0,y0+h) clipped to the image.
func (m *RGB) Crop(x0, y0, w, h int) (*RGB, error) { return nil, errTODO }

// Affine is a 2×3 matrix [a, c, tx, b, d, ty]: x' = a·x + c·y + tx,
// y' = b·x + d·y + ty. A similarity has the form [a, -b, tx, b, a, ty].
type Affine [6]float64

// EstimateSimilarity returns the least-squares similarity mapping from[i]
// to to[i].
func EstimateSimilarity(from, to [][2]float64) (Affine, error) { return Affine{}, errTODO }

// Apply maps a point.
func (a Affine) Apply(x, y float64) (float64, float64) {
	return a[0]*x + a[1]*y + a[2], a[3]*x + a[4]*y + a[5]
}

// Invert returns the inverse transform.
func (a Affine) Invert() (Affine, error) { return Affine{}, errTODO }

// WarpAffine samples src bilinearly at dstToSrc(x, y) for every pixel of a
// w×h output; samples outside the source are black.
func WarpAffine(src *RGB, dstToSrc Affine, w, h int) *RGB { return nil }

// DrawRect draws a rectangle outline.
func (m *RGB) DrawRect(x0, y0, x1, y1 float64, thickness int, r, g, b uint8) {}

// DrawDot draws a filled disc.
func (m *RGB) DrawDot(x, y float64, radius int, r, g, b uint8) {}

// EncodePNG writes the image as PNG.
func (m *RGB) EncodePNG(w io.Writer) error { return errTODO }

// Image returns a view for other Go image code.
func (m *RGB) Image() image.Image { return nil }
