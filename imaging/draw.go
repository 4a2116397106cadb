package imaging

import (
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
)

// DrawRect draws the outline of the rectangle with corners (x0, y0) and
// (x1, y1) (rounded to whole pixels), thickness pixels wide, growing inwards.
// Parts outside the image are clipped.
func (m *RGB) DrawRect(x0, y0, x1, y1 float64, thickness int, r, g, b uint8) {
	if thickness < 1 {
		thickness = 1
	}
	l, t := roundInt(math.Min(x0, x1)), roundInt(math.Min(y0, y1))
	rt, bt := roundInt(math.Max(x0, x1)), roundInt(math.Max(y0, y1))
	for k := 0; k < thickness; k++ {
		m.fill(l, t+k, rt, t+k, r, g, b)   // top
		m.fill(l, bt-k, rt, bt-k, r, g, b) // bottom
		m.fill(l+k, t, l+k, bt, r, g, b)   // left
		m.fill(rt-k, t, rt-k, bt, r, g, b) // right
	}
}

// DrawDot draws a filled disc of the given radius (0 = one pixel) centred on
// (x, y) rounded to the nearest pixel. Parts outside the image are clipped.
func (m *RGB) DrawDot(x, y float64, radius int, r, g, b uint8) {
	cx, cy := roundInt(x), roundInt(y)
	radius = max(radius, 0)
	for dy := -radius; dy <= radius; dy++ {
		for dx := -radius; dx <= radius; dx++ {
			if dx*dx+dy*dy <= radius*radius {
				m.Set(cx+dx, cy+dy, r, g, b)
			}
		}
	}
}

// fill paints the inclusive box [x0,x1]×[y0,y1] clipped to the image.
func (m *RGB) fill(x0, y0, x1, y1 int, r, g, b uint8) {
	x0, y0 = max(x0, 0), max(y0, 0)
	x1, y1 = min(x1, m.W-1), min(y1, m.H-1)
	for y := y0; y <= y1; y++ {
		for x := x0; x <= x1; x++ {
			i := 3 * (y*m.W + x)
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = r, g, b
		}
	}
}

// roundInt rounds to the nearest int, saturating far outside the int32 range
// (so drawing a NaN or huge coordinate is clipped instead of wrapping).
func roundInt(v float64) int {
	switch {
	case math.IsNaN(v) || v < -1<<31:
		return -1 << 31
	case v > 1<<31:
		return 1 << 31
	}
	return int(math.Round(v))
}

// EncodePNG writes the image as an 8-bit RGB PNG.
func (m *RGB) EncodePNG(w io.Writer) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.W == 0 || m.H == 0 {
		return fmt.Errorf("imaging: cannot encode an empty %d×%d image as PNG", m.W, m.H)
	}
	img := image.NewRGBA(image.Rect(0, 0, m.W, m.H))
	for i, j := 0, 0; i < len(m.Pix); i, j = i+3, j+4 {
		img.Pix[j], img.Pix[j+1], img.Pix[j+2], img.Pix[j+3] = m.Pix[i], m.Pix[i+1], m.Pix[i+2], 0xFF
	}
	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("imaging: encoding PNG: %w", err)
	}
	return nil
}
