package imaging

import (
	"errors"
	"fmt"
)

// Tile is one image of a contact sheet with the number drawn under it
// (DrawLabel's digits: ReadLabel reads them back).
type Tile struct {
	Image *RGB
	Label int
}

// SheetOptions lay out a contact sheet. Build them with DefaultSheetOptions
// and change fields; ContactSheet validates them.
type SheetOptions struct {
	// Columns is the number of tiles a row (at least 1).
	Columns int
	// Padding is the space in pixels around every tile and between an
	// image and its label (at least 0).
	Padding int
	// TextScale is the label's scale, pixels per dot of DrawLabel's
	// digits (1 to 8).
	TextScale int
	// MaxPixels bounds the sheet's size: a layout with more pixels is an
	// error, not a huge allocation.
	MaxPixels int
}

// DefaultSheetOptions are 8 columns, 6 pixels of padding, labels 3
// pixels a dot (digits 9×15 pixels) and at most 50 million pixels.
func DefaultSheetOptions() SheetOptions {
	return SheetOptions{Columns: 8, Padding: 6, TextScale: 3, MaxPixels: 50_000_000}
}

// Validate reports the first option out of its range.
func (o SheetOptions) Validate() error {
	switch {
	case o.Columns < 1:
		return fmt.Errorf("imaging: contact sheet columns %d: want at least 1", o.Columns)
	case o.Padding < 0:
		return fmt.Errorf("imaging: contact sheet padding %d: want at least 0", o.Padding)
	case o.TextScale < 1 || o.TextScale > 8:
		return fmt.Errorf("imaging: contact sheet text scale %d: want 1 to 8", o.TextScale)
	case o.MaxPixels < 1:
		return fmt.Errorf("imaging: contact sheet pixel limit %d: want at least 1", o.MaxPixels)
	}
	return nil
}

// ContactSheet lays the tiles out in rows of o.Columns on a white sheet,
// left to right and top to bottom, each image centred in a cell as large as
// the largest image and label, with its label (a number of black digits,
// DrawLabel's) centred under it. Images are not scaled. It needs at least
// one tile, refuses a negative label and a sheet of more than o.MaxPixels
// pixels.
func ContactSheet(tiles []Tile, o SheetOptions) (*RGB, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(tiles) == 0 {
		return nil, errors.New("imaging: a contact sheet needs at least one tile")
	}
	imgW, imgH, labelW, labelH := 0, 0, 0, 0
	for i, t := range tiles {
		if t.Image == nil {
			return nil, fmt.Errorf("imaging: contact sheet tile %d has no image", i)
		}
		if err := t.Image.Validate(); err != nil {
			return nil, fmt.Errorf("imaging: contact sheet tile %d: %w", i, err)
		}
		if t.Label < 0 {
			return nil, fmt.Errorf("imaging: contact sheet tile %d: label %d is negative", i, t.Label)
		}
		w, h := LabelSize(t.Label, o.TextScale)
		imgW, imgH = max(imgW, t.Image.W), max(imgH, t.Image.H)
		labelW, labelH = max(labelW, w), max(labelH, h)
	}
	cellW := max(imgW, labelW) + 2*o.Padding
	cellH := imgH + o.Padding + labelH + 2*o.Padding
	cols := min(o.Columns, len(tiles))
	rows := (len(tiles) + cols - 1) / cols
	if cellW > o.MaxPixels/cols || cellH > o.MaxPixels/(cols*cellW)/rows {
		return nil, fmt.Errorf("imaging: a contact sheet of %d tiles of %dx%d pixels would exceed %d pixels", len(tiles), cellW, cellH, o.MaxPixels)
	}
	sheet := NewRGB(cols*cellW, rows*cellH)
	for i := range sheet.Pix {
		sheet.Pix[i] = 0xFF
	}
	for i, t := range tiles {
		x0, y0 := (i%cols)*cellW, (i/cols)*cellH
		ix := x0 + (cellW-t.Image.W)/2
		iy := y0 + o.Padding + (imgH-t.Image.H)/2
		for y := 0; y < t.Image.H; y++ {
			copy(sheet.Pix[3*((iy+y)*sheet.W+ix):], t.Image.Pix[3*y*t.Image.W:3*(y+1)*t.Image.W])
		}
		w, _ := LabelSize(t.Label, o.TextScale)
		sheet.DrawLabel(float64(x0+(cellW-w)/2), float64(y0+o.Padding+imgH+o.Padding), t.Label, o.TextScale, 0xFF, 0xFF, 0xFF)
	}
	return sheet, nil
}
