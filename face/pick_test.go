package face

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

func TestLargest(t *testing.T) {
	box := func(w, h, score float64) Face { return Face{Box: Box{X: 5, Y: 5, Width: w, Height: h}, Score: score} }
	cases := []struct {
		name  string
		faces []Face
		want  int
	}{
		{"none", nil, -1},
		{"one", []Face{box(10, 10, 0.9)}, 0},
		{"largest last", []Face{box(10, 10, 0.99), box(20, 10, 0.6), box(30, 30, 0.51)}, 2},
		{"largest first", []Face{box(50, 40, 0.7), box(20, 10, 0.9)}, 0},
		{"equal areas: higher score", []Face{box(10, 20, 0.6), box(20, 10, 0.8), box(5, 40, 0.7)}, 1},
		{"equal areas and scores: first", []Face{box(10, 20, 0.8), box(20, 10, 0.8)}, 0},
	}
	for _, c := range cases {
		if got := Largest(c.faces); got != c.want {
			t.Errorf("%s: Largest = %d, want %d", c.name, got, c.want)
		}
	}
}

// landmarksIn spreads the 68 points over the rectangle [x0,x1]×[y0,y1].
func landmarksIn(x0, y0, x1, y1 float64) Landmarks {
	var l Landmarks
	for k := range l {
		l[k] = [2]float64{x0 + (x1-x0)*float64(k%9)/8, y0 + (y1-y0)*float64(k/9)/7}
	}
	return l
}

func TestRegionBoxAndCrop(t *testing.T) {
	// Landmarks spanning 100×80 at (50, 60): AgeGenderBox is 120×96 at
	// (40, 52); the region box is the 120-px square about its centre.
	l := landmarksIn(50, 60, 150, 140)
	b := RegionBox(&l)
	want := Box{X: 40, Y: 40, Width: 120, Height: 120}
	for _, p := range [][2]float64{{b.X, want.X}, {b.Y, want.Y}, {b.Width, want.Width}, {b.Height, want.Height}} {
		if math.Abs(p[0]-p[1]) > 1e-9 {
			t.Fatalf("RegionBox = %+v, want %+v", b, want)
		}
	}
	img := imaging.NewRGB(300, 200)
	c, err := RegionCrop(img, &l)
	if err != nil {
		t.Fatal(err)
	}
	if c.W != 120 || c.H != 120 {
		t.Errorf("crop %d×%d, want 120×120", c.W, c.H)
	}
	// A face at the corner is clipped, not refused.
	edge := landmarksIn(-20, -10, 60, 50)
	c, err = RegionCrop(img, &edge)
	if err != nil {
		t.Fatal(err)
	}
	if c.W >= 96 || c.H >= 96 || c.W <= 0 || c.H <= 0 {
		t.Errorf("corner crop %d×%d, want clipped below the 96-px square", c.W, c.H)
	}
	// A face wholly outside the image is an error.
	out := landmarksIn(400, 300, 450, 350)
	if _, err := RegionCrop(img, &out); err == nil {
		t.Error("crop outside the image accepted")
	}
}
