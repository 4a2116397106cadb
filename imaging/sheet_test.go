package imaging

import (
	"bytes"
	"image/png"
	"strconv"
	"strings"
	"testing"
)

// solid returns a w×h image of one colour.
func solid(w, h int, r, g, b uint8) *RGB {
	m := NewRGB(w, h)
	for i := 0; i < len(m.Pix); i += 3 {
		m.Pix[i], m.Pix[i+1], m.Pix[i+2] = r, g, b
	}
	return m
}

func TestContactSheet(t *testing.T) {
	labels := []int{7, 12, 31, 1024, 5}
	var tiles []Tile
	for i, l := range labels {
		// Different sizes: thumbnails of faces near a photo's edge are
		// not square.
		tiles = append(tiles, Tile{Image: solid(40+i, 50-i, 200, uint8(40*i), 30), Label: l})
	}
	o := DefaultSheetOptions()
	o.Columns = 2
	sheet, err := ContactSheet(tiles, o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := sheet.EncodePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("the sheet does not decode as PNG: %v", err)
	}
	// Cells: as wide as the widest image or label, as tall as the tallest
	// image plus a label.
	labelW, labelH := LabelSize(1024, o.TextScale)
	cellW := max(44, labelW) + 2*o.Padding
	cellH := 50 + 3*o.Padding + labelH
	if b := img.Bounds(); b.Dx() != 2*cellW || b.Dy() != 3*cellH {
		t.Fatalf("sheet is %dx%d, want 2x3 cells of %dx%d", b.Dx(), b.Dy(), cellW, cellH)
	}
	// One tile per image: each cell's centre has its image's colour.
	for i := range tiles {
		cx := (i%2)*cellW + cellW/2
		cy := (i/2)*cellH + o.Padding + 25
		r, g, b := sheet.At(cx, cy)
		if r != 200 || g != uint8(40*i) || b != 30 {
			t.Errorf("tile %d: centre colour %d,%d,%d, want 200,%d,30", i, r, g, b, 40*i)
		}
	}
	// The sixth cell is empty: white.
	if r, g, b := sheet.At(cellW+cellW/2, 2*cellH+cellH/2); r != 255 || g != 255 || b != 255 {
		t.Errorf("empty cell is %d,%d,%d, want white", r, g, b)
	}
	// Each label reads back as its number, centred under its image.
	for i, l := range labels {
		w, _ := LabelSize(l, o.TextScale)
		x := (i%2)*cellW + (cellW-w)/2
		y := (i/2)*cellH + o.Padding + 50 + o.Padding
		if n, ok := sheet.ReadLabel(x, y, o.TextScale, len(strconv.Itoa(l))); !ok || n != l {
			t.Errorf("tile %d: label reads %d (ok %v), want %d", i, n, ok, l)
		}
	}
}

func TestContactSheetRefuses(t *testing.T) {
	ok := []Tile{{Image: solid(4, 4, 1, 2, 3), Label: 1}}
	tooBig := DefaultSheetOptions()
	tooBig.MaxPixels = 100
	noCols := DefaultSheetOptions()
	noCols.Columns = 0
	for _, tc := range []struct {
		name  string
		tiles []Tile
		o     SheetOptions
		want  string
	}{
		{"no tiles", nil, DefaultSheetOptions(), "at least one tile"},
		{"nil image", []Tile{{Label: 1}}, DefaultSheetOptions(), "has no image"},
		{"negative label", []Tile{{Image: solid(4, 4, 1, 2, 3), Label: -1}}, DefaultSheetOptions(), "label -1 is negative"},
		{"bad image", []Tile{{Image: &RGB{W: 3, H: 3}}}, DefaultSheetOptions(), "tile 0"},
		{"too big", ok, tooBig, "exceed 100 pixels"},
		{"no columns", ok, noCols, "columns 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ContactSheet(tc.tiles, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
