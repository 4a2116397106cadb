package tagging

import (
	"bytes"
	"errors"
	"fmt"
	"image/jpeg"
	"math"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
)

// Thumbnail settings. A face thumbnail shows a person enough to recognise
// whom a face is when naming it, and no more: it is sealed like the
// descriptor, and small so that a library of 100k faces stays a few
// hundred MB.
const (
	// ThumbSize is the longest side of a face thumbnail in pixels.
	ThumbSize = 96
	// thumbMargin is the side of the square cut around a face as a
	// multiple of the box's longer side: hair and chin, as photo managers
	// show faces.
	thumbMargin = 1.5
	// thumbQuality is the JPEG quality of thumbnails.
	thumbQuality = 80
)

// ErrBox is wrapped by errors about a face box that is not a usable
// rectangle inside its photo.
var ErrBox = errors.New("bad face box")

// Thumbnail returns a JPEG of the face in box: a square of thumbMargin
// times the box's longer side centred on the box, clipped to the photo,
// scaled by area averaging so its longer side is ThumbSize (smaller crops
// are enlarged). The box must have a positive, finite size and overlap
// the photo.
func Thumbnail(img *imaging.RGB, box face.Box) ([]byte, error) {
	if err := img.Validate(); err != nil {
		return nil, fmt.Errorf("thumbnail: %w", err)
	}
	for _, v := range []float64{box.X, box.Y, box.Width, box.Height} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("thumbnail: %w: coordinates must be finite", ErrBox)
		}
	}
	if box.Width <= 0 || box.Height <= 0 {
		return nil, fmt.Errorf("thumbnail: %w: size %gx%g is not positive", ErrBox, box.Width, box.Height)
	}
	cx, cy := box.Center()
	half := thumbMargin * math.Max(box.Width, box.Height) / 2
	x0 := int(math.Floor(math.Max(cx-half, 0)))
	y0 := int(math.Floor(math.Max(cy-half, 0)))
	x1 := int(math.Ceil(math.Min(cx+half, float64(img.W))))
	y1 := int(math.Ceil(math.Min(cy+half, float64(img.H))))
	if x1 <= x0 || y1 <= y0 {
		return nil, fmt.Errorf("thumbnail: %w: box %.0f,%.0f %.0fx%.0f lies outside the %dx%d photo", ErrBox, box.X, box.Y, box.Width, box.Height, img.W, img.H)
	}
	crop, err := img.Crop(x0, y0, x1-x0, y1-y0)
	if err != nil {
		return nil, fmt.Errorf("thumbnail: %w", err)
	}
	w, h := ThumbSize, ThumbSize
	if crop.W > crop.H {
		h = max(1, int(math.Round(float64(ThumbSize*crop.H)/float64(crop.W))))
	} else if crop.H > crop.W {
		w = max(1, int(math.Round(float64(ThumbSize*crop.W)/float64(crop.H))))
	}
	small := areaResize(crop, w, h)
	var b bytes.Buffer
	if err := jpeg.Encode(&b, small.Image(), &jpeg.Options{Quality: thumbQuality}); err != nil {
		return nil, fmt.Errorf("thumbnail: encoding: %w", err)
	}
	return b.Bytes(), nil
}

// areaResize scales m to w×h, each output pixel the mean of the source
// pixels its footprint touches (at least one): a box filter, which does
// not alias when shrinking as bilinear sampling does.
func areaResize(m *imaging.RGB, w, h int) *imaging.RGB {
	out := imaging.NewRGB(w, h)
	sx, sy := float64(m.W)/float64(w), float64(m.H)/float64(h)
	for oy := 0; oy < h; oy++ {
		ya := int(float64(oy) * sy)
		yb := max(ya+1, min(m.H, int(math.Ceil(float64(oy+1)*sy))))
		for ox := 0; ox < w; ox++ {
			xa := int(float64(ox) * sx)
			xb := max(xa+1, min(m.W, int(math.Ceil(float64(ox+1)*sx))))
			var r, g, b, n int
			for y := ya; y < yb; y++ {
				row := m.Pix[3*(y*m.W+xa) : 3*(y*m.W+xb)]
				for i := 0; i < len(row); i += 3 {
					r += int(row[i])
					g += int(row[i+1])
					b += int(row[i+2])
				}
				n += xb - xa
			}
			o := 3 * (oy*w + ox)
			out.Pix[o], out.Pix[o+1], out.Pix[o+2] = uint8((r+n/2)/n), uint8((g+n/2)/n), uint8((b+n/2)/n)
		}
	}
	return out
}
