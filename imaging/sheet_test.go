package imaging

import (
	"bytes"
	"image/png"
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

// region copies the w×h block of m at (x, y).
func region(t *testing.T, m *RGB, x, y, w, h int) []byte {
	t.Helper()
	c, err := m.Crop(x, y, w, h)
	if err != nil {
		t.Fatal(err)
	}
	return c.Pix
}

func TestDrawTextPaintsDistinctGlyphs(t *testing.T) {
	for _, scale := range []int{1, 2, 3} {
		w, h := TextSize("0123456789", scale)
		if w != 70*scale || h != 13*scale {
			t.Fatalf("scale %d: TextSize = %dx%d, want %dx%d", scale, w, h, 70*scale, 13*scale)
		}
		m := solid(w, h, 255, 255, 255)
		m.DrawText(0, 0, "0123456789", scale, 0, 0, 0)
		seen := map[string]int{}
		for d := 0; d < 10; d++ {
			g := region(t, m, d*7*scale, 0, 7*scale, h)
			if !bytes.ContainsRune(g, 0) {
				t.Fatalf("scale %d: digit %d painted nothing", scale, d)
			}
			if prev, ok := seen[string(g)]; ok {
				t.Fatalf("scale %d: digits %d and %d look the same", scale, prev, d)
			}
			seen[string(g)] = d
		}
	}
}

func TestDrawTextClips(t *testing.T) {
	m := solid(5, 5, 255, 255, 255)
	// Far outside and partly outside: no panic, only visible pixels change.
	m.DrawText(-1000, -1000, "88", 4, 0, 0, 0)
	m.DrawText(1<<30, 2, "8", 1, 0, 0, 0)
	m.DrawText(-3, -5, "8", 2, 0, 0, 0)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestContactSheet(t *testing.T) {
	labels := []string{"7", "12", "31", "1024", "5"}
	var tiles []Tile
	for i, l := range labels {
		// Different sizes: thumbnails of faces near a photo's edge are
		// not square.
		tiles = append(tiles, Tile{Image: solid(40+i, 50-i, 200, uint8(40*i), 30), Label: l})
	}
	o := DefaultSheetOptions()
	o.Columns = 2
	o.TextScale = 1
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
	cellW := 44 + 2*o.Padding
	labelW, labelH := TextSize("1024", 1)
	cellW = max(cellW, labelW+2*o.Padding)
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
	// Each label is drawn (black pixels) and the labels differ.
	seen := map[string]string{}
	for i, l := range labels {
		y := (i/2)*cellH + o.Padding + 50 + o.Padding
		lab := region(t, sheet, (i%2)*cellW, y, cellW, labelH)
		if !bytes.Contains(lab, []byte{0, 0, 0}) {
			t.Errorf("label %q: no black pixel under tile %d", l, i)
		}
		if other, ok := seen[string(lab)]; ok {
			t.Errorf("labels %q and %q drew the same pixels", other, l)
		}
		seen[string(lab)] = l
	}
}

func TestContactSheetRefuses(t *testing.T) {
	ok := []Tile{{Image: solid(4, 4, 1, 2, 3), Label: "1"}}
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
		{"nil image", []Tile{{Label: "1"}}, DefaultSheetOptions(), "has no image"},
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
