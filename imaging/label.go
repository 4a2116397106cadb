package imaging

import "strconv"

// digitGlyphs are 3×5 bitmaps of the digits 0–9, one row per 3 bits (most
// significant bit on the left), top row first.
var digitGlyphs = [10][5]uint8{
	{7, 5, 5, 5, 7}, // 0
	{2, 6, 2, 2, 7}, // 1
	{7, 1, 7, 4, 7}, // 2
	{7, 1, 7, 1, 7}, // 3
	{5, 5, 7, 1, 1}, // 4
	{7, 4, 7, 1, 7}, // 5
	{7, 4, 7, 5, 7}, // 6
	{7, 1, 2, 2, 2}, // 7
	{7, 5, 7, 5, 7}, // 8
	{7, 5, 7, 1, 7}, // 9
}

// LabelSize returns the width and height in pixels of DrawLabel's label
// of n at the given scale (pixels per glyph dot, at least 1).
func LabelSize(n, scale int) (w, h int) {
	scale = max(scale, 1)
	digits := len(strconv.Itoa(n))
	// One dot of margin around the digits and one between them.
	return (4*digits + 1) * scale, 7 * scale
}

// DrawLabel draws the decimal number n (n ≥ 0) as a filled tag with its
// top-left corner at (x, y) rounded to the nearest pixel: a box of colour
// (r, g, b) holding the digits in black, 3×5 dots each, scale pixels per
// dot. Parts outside the image are clipped. It is how drawn faces carry
// their numbers.
func (m *RGB) DrawLabel(x, y float64, n, scale int, r, g, b uint8) {
	scale = max(scale, 1)
	n = max(n, 0)
	w, h := LabelSize(n, scale)
	x0, y0 := roundInt(x), roundInt(y)
	m.fill(x0, y0, x0+w-1, y0+h-1, r, g, b)
	for k, c := range strconv.Itoa(n) {
		glyph := digitGlyphs[c-'0']
		gx := x0 + (1+4*k)*scale
		for row, bits := range glyph {
			for col := range 3 {
				if bits&(4>>col) != 0 {
					px, py := gx+col*scale, y0+(1+row)*scale
					m.fill(px, py, px+scale-1, py+scale-1, 0, 0, 0)
				}
			}
		}
	}
}

// ReadLabel reads back a label of digits digits that DrawLabel drew with
// its top-left corner at (x, y) and the given scale: each 3×5 cell is
// matched against the glyphs (a dot is black). ok is false when a cell
// matches no digit or lies outside the image. It lets tests and tools
// check a drawing.
func (m *RGB) ReadLabel(x, y, scale, digits int) (n int, ok bool) {
	scale = max(scale, 1)
	for k := range digits {
		var cell [5]uint8
		for row := range 5 {
			for col := range 3 {
				px, py := x+(1+4*k+col)*scale, y+(1+row)*scale
				if px < 0 || py < 0 || px >= m.W || py >= m.H {
					return 0, false
				}
				i := 3 * (py*m.W + px)
				if m.Pix[i] == 0 && m.Pix[i+1] == 0 && m.Pix[i+2] == 0 {
					cell[row] |= 4 >> col
				}
			}
		}
		d := -1
		for j, g := range digitGlyphs {
			if g == cell {
				d = j
			}
		}
		if d < 0 {
			return 0, false
		}
		n = 10*n + d
	}
	return n, digits > 0
}
