package imaging

import (
	"image"

	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// textFont is the bitmap font of DrawText: 7×13 pixels a character, printable
// ASCII (other characters are drawn as the font's replacement box).
var textFont = basicfont.Face7x13

// TextSize returns the width and height in pixels of s as DrawText draws it
// at scale (values below 1 count as 1): one line, every character the same
// width.
func TextSize(s string, scale int) (w, h int) {
	scale = max(scale, 1)
	n := 0
	for range s {
		n++
	}
	return n * textFont.Advance * scale, (textFont.Ascent + textFont.Descent) * scale
}

// DrawText draws s on one line with the top-left corner of its box (as
// TextSize measures it) at (x, y), in a 7×13 bitmap font whose pixels are
// drawn as scale×scale squares (scale below 1 counts as 1). Only the
// glyphs' pixels are painted, so the background shows through; parts
// outside the image are clipped.
func (m *RGB) DrawText(x, y int, s string, scale int, r, g, b uint8) {
	scale = max(scale, 1)
	// The font's glyphs hang from a baseline Ascent pixels below the top.
	dot := fixed.P(0, textFont.Ascent)
	for _, c := range s {
		dr, mask, mp, adv, _ := textFont.Glyph(dot, c)
		m.drawMask(x, y, dr, mask, mp, scale, r, g, b)
		dot.X += adv
	}
}

// drawMask paints the pixels of dr (font units, offset by (x, y) after
// scaling) where mask, read from mp, is at least half opaque.
func (m *RGB) drawMask(x, y int, dr image.Rectangle, mask image.Image, mp image.Point, scale int, r, g, b uint8) {
	for gy := dr.Min.Y; gy < dr.Max.Y; gy++ {
		for gx := dr.Min.X; gx < dr.Max.X; gx++ {
			_, _, _, a := mask.At(mp.X+gx-dr.Min.X, mp.Y+gy-dr.Min.Y).RGBA()
			if a < 0x8000 {
				continue
			}
			m.fill(x+gx*scale, y+gy*scale, x+(gx+1)*scale-1, y+(gy+1)*scale-1, r, g, b)
		}
	}
}
