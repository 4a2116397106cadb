package tagging

import (
	"bytes"
	"errors"
	"image/jpeg"
	"math"
	"testing"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
)

// redSquare is a grey w×h image with a red square at (x, y) of side s.
func redSquare(w, h, x, y, s int) *imaging.RGB {
	m := imaging.NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = 128
	}
	for yy := y; yy < y+s; yy++ {
		for xx := x; xx < x+s; xx++ {
			m.Set(xx, yy, 230, 20, 20)
		}
	}
	return m
}

func TestThumbnail(t *testing.T) {
	tests := []struct {
		name        string
		img         *imaging.RGB
		box         face.Box
		w, h        int
		redAtCentre bool
	}{
		{"large face shrunk", redSquare(800, 600, 300, 200, 200), face.Box{X: 300, Y: 200, Width: 200, Height: 200}, 96, 96, true},
		{"small face enlarged", redSquare(100, 100, 45, 45, 10), face.Box{X: 45, Y: 45, Width: 10, Height: 10}, 96, 96, true},
		{"face at the left edge clipped", redSquare(400, 400, 0, 150, 100), face.Box{X: 0, Y: 150, Width: 100, Height: 100}, 80, 96, false}, // 125×150 cut,
		{"box partly outside", redSquare(200, 200, 150, 150, 50), face.Box{X: 150, Y: 150, Width: 80, Height: 80}, 96, 96, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Thumbnail(tc.img, tc.box)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 8<<10 {
				t.Errorf("thumbnail is %d bytes", len(b))
			}
			m, err := jpeg.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Bounds(); got.Dx() != tc.w || got.Dy() != tc.h {
				t.Fatalf("thumbnail %dx%d, want %dx%d", got.Dx(), got.Dy(), tc.w, tc.h)
			}
			if tc.redAtCentre {
				r, g, _, _ := m.At(tc.w/2, tc.h/2).RGBA()
				if r>>8 < 180 || g>>8 > 70 {
					t.Errorf("centre is %d,%d (not the red face)", r>>8, g>>8)
				}
				// The margin shows the surroundings: the corner is grey.
				r, g, _, _ = m.At(2, 2).RGBA()
				if math.Abs(float64(r>>8)-128) > 20 || math.Abs(float64(g>>8)-128) > 20 {
					t.Errorf("corner is %d,%d (want the grey around the face)", r>>8, g>>8)
				}
			}
		})
	}
}

func TestThumbnailBadBox(t *testing.T) {
	img := redSquare(100, 80, 10, 10, 10)
	for _, b := range []face.Box{
		{X: 10, Y: 10, Width: 0, Height: 10},
		{X: 10, Y: 10, Width: 10, Height: -1},
		{X: math.NaN(), Y: 10, Width: 10, Height: 10},
		{X: 10, Y: 10, Width: math.Inf(1), Height: 10},
		{X: 500, Y: 10, Width: 10, Height: 10},
		{X: -100, Y: -100, Width: 20, Height: 20},
	} {
		if _, err := Thumbnail(img, b); !errors.Is(err, ErrBox) {
			t.Errorf("box %+v: %v, want ErrBox", b, err)
		}
	}
}

func TestAreaResizeMean(t *testing.T) {
	// A 4×2 image of two flat halves shrunk to 2×1 keeps each half's colour.
	m := imaging.NewRGB(4, 2)
	for y := 0; y < 2; y++ {
		for x := 0; x < 4; x++ {
			v := uint8(10)
			if x >= 2 {
				v = 250
			}
			m.Set(x, y, v, v/2, 0)
		}
	}
	out := areaResize(m, 2, 1)
	if got := out.Pix; !bytes.Equal(got, []byte{10, 5, 0, 250, 125, 0}) {
		t.Errorf("got %v", got)
	}
	// Checkerboard averaged to mid-grey (no aliasing to black or white).
	c := imaging.NewRGB(8, 8)
	for y := 0; y < 8; y++ {
		for x := 0; x < 8; x++ {
			if (x+y)%2 == 0 {
				c.Set(x, y, 255, 255, 255)
			}
		}
	}
	for i, v := range areaResize(c, 2, 2).Pix {
		if v < 126 || v > 129 {
			t.Fatalf("pixel byte %d = %d, want about 128", i, v)
		}
	}
}
